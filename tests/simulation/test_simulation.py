"""The simulator replays bursty loads through the real dispatcher, planner and batch policy."""

from __future__ import annotations

from collections import defaultdict

import pytest

from infless.coldstart.config import ColdStartConfig
from infless.scaling.config import POLICY_NAMES, ScalingConfig
from infless.scaling.predictors import AnalyticModel, AnalyticPredictor, ScaledPredictor
from infless.sim.engine import SimConfig, SimFunction, Simulation, simulate
from infless.sim.results import SimResult
from infless.sim.workload import RateSchedule, bursty

# "truth": what batches really take; the planner sees it through a 10 % safety offset (§3.3)
TRUTH = AnalyticPredictor(
    {
        "textcnn": AnalyticModel(fixed_ms=1.5, per_item_ms=4.0),
        "lstm": AnalyticModel(fixed_ms=3.0, per_item_ms=9.0),
        "resnet": AnalyticModel(fixed_ms=10.0, per_item_ms=60.0),
    }
)
PLANNER = ScaledPredictor(TRUTH, 1.1)
MIX = (
    SimFunction("textcnn", "textcnn", 50.0, 32, bursty(200.0, 1200.0, 90.0, first_burst_s=10.0)),
    SimFunction("lstm", "lstm", 50.0, 32, bursty(100.0, 500.0, 90.0, first_burst_s=15.0)),
    SimFunction("resnet", "resnet", 200.0, 16, bursty(40.0, 250.0, 90.0, first_burst_s=20.0)),
)
SMALL = SimConfig(servers=8, cpus_per_server=16, duration_s=90.0, exec_jitter=0.05, seed=3)


def run(policy: str, cfg: SimConfig = SMALL) -> SimResult:
    return simulate(MIX, TRUTH, cfg, ScalingConfig(policy=policy), PLANNER)


def configs_per_function(result: SimResult) -> dict[str, set[str]]:
    found: dict[str, set[str]] = defaultdict(set)
    for key in result.configs:
        function, label = key.split(" ")
        found[function].add(label)
    return found


def test_bursty_load_meets_the_slo_without_overrunning_capacity() -> None:
    result = run("infless")
    assert result.requests > 50_000
    assert result.violation_rate <= 0.01
    assert result.capacity_overruns == 0
    assert result.completed + result.rejected + result.unserved == result.requests
    assert result.mean_batch > 1.5  # batching happened ("slo" dispatch: the smallest sustaining)
    # non-uniform: one function runs instances with different <b, c>
    assert max(len(labels) for labels in configs_per_function(result).values()) >= 2


def test_infless_serves_the_same_load_with_fewer_cores_than_the_baselines() -> None:
    infless, openfaas = run("infless"), run("openfaas+")
    assert openfaas.mean_batch == 1.0
    assert infless.cores_per_100_rps < openfaas.cores_per_100_rps
    assert infless.violation_rate <= openfaas.violation_rate + 0.005


@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_every_policy_runs_through_the_same_machinery(policy: str) -> None:
    short = SimConfig(servers=8, duration_s=20.0, seed=5)
    result = run(policy, short)
    assert result.capacity_overruns == 0
    assert result.completed > 0.9 * result.requests
    if policy in {"infless-nobatch", "openfaas+"}:
        assert result.mean_batch == 1.0


def test_a_thousand_servers() -> None:
    models = {f"m{k}": AnalyticModel(1.0 + k % 4, 3.0 + 3 * (k % 5)) for k in range(30)}
    truth = AnalyticPredictor(models)
    functions = [
        SimFunction(
            f"f{k}",
            f"m{k}",
            50.0 if k % 2 else 200.0,
            16,
            bursty(5.0 + k, 30.0 + 4 * k, 20.0, 20.0, 6.0, 3.0, first_burst_s=4.0 + k % 5),
        )
        for k in range(30)
    ]
    cfg = SimConfig(servers=1000, cpus_per_server=16, gpus_per_server=0, duration_s=20.0)
    sim = Simulation(functions, truth, cfg, ScalingConfig(), ScaledPredictor(truth, 1.1))
    result = sim.run()
    assert result.servers == 1000
    assert result.capacity_overruns == 0
    assert result.unmet_ticks == 0
    # first bursts of low-rate functions hide in Poisson noise for a tick or two
    assert result.violation_rate <= 0.05
    used = [s for s in sim.servers if s.free_cpus < s.cpus]
    assert 0 < len(used) <= 60  # best fit packs 30 functions onto few servers
    assert all(s.free_cpus == s.cpus for s in sim.servers if s not in used)


def test_the_simulator_runs_the_servers_prewarm_manager_on_scale_to_zero_functions() -> None:
    """Bursts every 20 s, idle between: the cold-start policy (fixed 4-s keep-alive) releases
    the function after each burst and the next burst wakes it; no request is left behind."""
    points: list[tuple[float, float]] = [(0.0, 0.0)]
    for start_s in (5.0, 25.0, 45.0):
        points += [(start_s, 0.0), (start_s + 0.001, 60.0), (start_s + 2.0, 60.0)]
        points += [(start_s + 2.001, 0.0)]
    function = SimFunction(
        "periodic", "textcnn", 50.0, 8, RateSchedule(tuple(points)), scale_to_zero=True
    )
    coldstart = ColdStartConfig(policy="fixed", params={"keepalive_s": 4.0}, release_grace_s=0.0)
    cfg = SimConfig(servers=1, duration_s=60.0, prewarm=False, coldstart=coldstart)
    sim = Simulation([function], TRUTH, cfg, ScalingConfig(), PLANNER)
    result = sim.run()
    assert sim.prewarm is not None
    described = sim.prewarm.describe("periodic")
    assert described is not None
    assert described.releases >= 2  # after each of the first two bursts (at least)
    assert result.instance_starts >= 3  # the first start, then a wake per later burst
    # requests that found nothing running waited for the woken instance, none was left
    assert result.unserved == 0
    assert result.completed + result.rejected == result.requests


@pytest.mark.parametrize("store_affinity", [True, False])
def test_servers_report_the_store_affinity_of_the_models_they_hold(store_affinity: bool) -> None:
    cfg = SimConfig(servers=8, cpus_per_server=16, duration_s=5.0, store_affinity=store_affinity)
    sim = Simulation(MIX, TRUTH, cfg, planner_predictor=PLANNER)
    sim.run()
    cluster = sim.world.cluster
    held = {s.server_id: set(s.models) for s in cluster.servers}
    assert any(held.values())  # some server holds an instance at the end
    for view in cluster.snapshot().servers:
        expected = {f.name for f in MIX if f.model_key in held[view.server_id]}
        assert set(view.affinity) == (expected if store_affinity else set())
        assert all(value == 1.0 for value in view.affinity.values())

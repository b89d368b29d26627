"""The DTS policy (Tetris): each instance's <b, c, g> and server by served rate per MiB of
cost, memory with the store's sharing counted plus cores × alpha; selectable by config."""

from __future__ import annotations

import math

import pytest

from infless.config import parse_config
from infless.dataplane.policy import powers_of_two_up_to
from infless.errors import ConfigError
from infless.scaling.baselines import get_policy
from infless.scaling.bounds import rate_bounds
from infless.scaling.capacity import CapacityIndex
from infless.scaling.config import ScalingConfig, check_scaling
from infless.scaling.demand import Demand
from infless.scaling.dts import DtsChooser, held_weights, plan_dts
from infless.scaling.memory import MIB, RUNTIME_BYTES, ModelMemory
from infless.scaling.placement import Candidate
from infless.scaling.planner import plan
from infless.scaling.predictors import AnalyticModel, AnalyticPredictor
from infless.scaling.view import FunctionView, InstanceView, PoolView, ServerView
from infless.types import InstanceConfig

MODEL = AnalyticModel(2.0, 8.0)
PRED = AnalyticPredictor({"m": MODEL})
SLO_MS = 100.0
# activations that grow with the batch: the largest batch is not the cheapest per request
HEAVY = ModelMemory(weight_bytes=200 * MIB, activation_bytes_per_sample=10 * MIB)


def fn(
    name: str = "f",
    memory: ModelMemory | None = HEAVY,
    instances: tuple[InstanceView, ...] = (),
    slo_ms: float = SLO_MS,
) -> FunctionView:
    return FunctionView(name, "m", slo_ms, 32, instances=instances, memory=memory)


def running(server_id: str, function: str = "g") -> InstanceView:
    return InstanceView(f"{function}-1", function, server_id, InstanceConfig(1, 2, 0))


def memory_per_request(config: InstanceConfig, memory: ModelMemory) -> float:
    """MiB of private memory and weights per request/s of one instance (cores free)."""
    exec_ms = MODEL.latency_ms(config.batch_size, config.cpus)
    bounds = rate_bounds(config.batch_size, exec_ms, SLO_MS)
    mib = (memory.private_bytes(config.batch_size) + memory.weight_bytes) / MIB
    return mib / bounds.r_up_rps


def meets_the_slo_rule(config: InstanceConfig, slo_ms: float) -> bool:
    """Tetris's rule: t_exec ≤ SLO/2, or ≤ SLO at b = 1."""
    exec_ms = MODEL.latency_ms(config.batch_size, config.cpus)
    return exec_ms <= (slo_ms if config.batch_size == 1 else slo_ms / 2)


def test_a_server_holding_the_model_makes_the_next_instance_there_cheaper() -> None:
    roomy = ServerView("roomy", 16, 14)  # an instance of model m (another function) runs here
    snug = ServerView("snug", 16, 4)  # the tighter fit: INFless's Equation 10 picks it
    cfg = ScalingConfig(policy="dts", cpu_options=(2,))
    view = PoolView((snug, roomy), (fn("f"), fn("g", instances=(running("roomy"),))))
    chooser = DtsChooser(held_weights(view), cfg.dts_alpha_mib_per_core, cfg.beta)
    config = InstanceConfig(4, 2, 0)
    cand = Candidate(config, rate_bounds(4, MODEL.latency_ms(4, 2), SLO_MS), 2.0)
    held, bare = chooser.cost_mib(fn(), cand, 1.0), chooser.cost_mib(fn(), cand, 0.0)
    assert bare - held == pytest.approx(HEAVY.weight_bytes / MIB)

    demand = Demand({"f": 5.0})
    (dts_start,) = plan_dts(view, demand, PRED, cfg).starts
    assert dts_start.server_id == "roomy"
    (infless_start,) = plan(view, demand, PRED, cfg).starts
    assert infless_start.server_id == "snug"


def test_the_weights_count_once_per_server_within_one_plan() -> None:
    cfg = ScalingConfig(policy="dts", cpu_options=(2,))
    servers = (ServerView("a", 16, 16), ServerView("b", 16, 16))
    result = plan_dts(PoolView(servers, (fn(),)), Demand({"f": 3000.0}), PRED, cfg)
    starts = result.starts
    assert [s.server_id for s in starts[:9]] == ["a"] * 8 + ["b"]
    # the first instance on a server pays for the weights, the next ones there do not
    assert starts[1].efficiency > starts[0].efficiency
    assert starts[8].efficiency == pytest.approx(starts[0].efficiency)


def test_with_alpha_zero_it_takes_the_least_memory_per_request_meeting_half_the_slo() -> None:
    cfg = ScalingConfig(policy="dts", dts_alpha_mib_per_core=0.0)
    feasible = [
        InstanceConfig(b, c, 0)
        for b in powers_of_two_up_to(32)
        for c in cfg.cpu_options
        if meets_the_slo_rule(InstanceConfig(b, c, 0), SLO_MS)
    ]
    expected = min(feasible, key=lambda config: memory_per_request(config, HEAVY))
    assert expected.batch_size < max(k.batch_size for k in feasible)  # memory decided it
    view = PoolView(tuple(ServerView(f"s{k}", 16, 16) for k in range(8)), (fn(),))
    first = plan_dts(view, Demand({"f": 20_000.0}), PRED, cfg).starts[0]
    assert first.config == expected


def test_a_config_over_half_the_slo_is_never_picked() -> None:
    # one core, no activations: the largest batch is the cheapest per request, but too slow
    light = ModelMemory(weight_bytes=10 * MIB, activation_bytes_per_sample=0)
    slo_ms = 60.0
    cfg = ScalingConfig(policy="dts", cpu_options=(1,), dts_alpha_mib_per_core=0.0)
    too_slow = [
        b
        for b in powers_of_two_up_to(32)
        if not meets_the_slo_rule(InstanceConfig(b, 1, 0), slo_ms)
    ]
    assert too_slow  # the cheapest-per-request configurations exist and break the rule
    view = PoolView(
        tuple(ServerView(f"s{k}", 16, 16) for k in range(4)), (fn(memory=light, slo_ms=slo_ms),)
    )
    for rate_rps in (5.0, 200.0, 2000.0):
        starts = plan_dts(view, Demand({"f": rate_rps}), PRED, cfg).starts
        assert starts
        for start in starts:
            assert meets_the_slo_rule(start.config, slo_ms), (rate_rps, start.config)


def test_a_function_without_memory_figures_is_priced_as_a_runtime() -> None:
    chooser = DtsChooser({}, 64.0, 0.45)
    cand = Candidate(InstanceConfig(8, 4, 0), rate_bounds(8, MODEL.latency_ms(8, 4), SLO_MS), 4.0)
    bare = fn(memory=None)
    assert chooser.cost_mib(bare, cand, 0.0) == pytest.approx(RUNTIME_BYTES / MIB + 64.0 * 4)
    view = PoolView((ServerView("s0", 16, 16),), (bare,))
    starts = plan_dts(view, Demand({"f": 100.0}), PRED, ScalingConfig(policy="dts")).starts
    assert starts
    assert sum(s.r_up_rps for s in starts) >= 100.0


def test_taking_back_a_placement_restores_what_the_server_held() -> None:
    view = PoolView((ServerView("s0", 16, 16), ServerView("s1", 16, 16)), (fn(),))
    held = held_weights(view)
    chooser = DtsChooser(held, 64.0, 0.45)
    index = CapacityIndex(view.servers, 0.45)
    config = InstanceConfig(1, 2, 0)
    cand = Candidate(config, rate_bounds(1, MODEL.latency_ms(1, 2), SLO_MS), 2.0)
    choice = chooser.pick(fn(), [cand], 50.0, index, 1.0)
    assert choice is not None
    pos = choice[1]
    assert held["m"] == {pos: 1.0}
    chooser.unplaced(fn(), pos)
    assert held["m"] == {}


def test_store_affinity_counts_as_the_share_of_weights_held() -> None:
    servers = (ServerView("s0", 16, 16), ServerView("s1", 16, 16, affinity={"f": 0.5}))
    assert held_weights(PoolView(servers, (fn(),))) == {"m": {1: 0.5}}


def test_dts_is_selectable_by_config() -> None:
    assert get_policy("dts") is plan_dts
    config = parse_config({"scaling": {"policy": "dts", "dts_alpha_mib_per_core": 0.0}})
    assert config.scaling.policy == "dts"
    assert check_scaling(ScalingConfig(policy="dts")) == []
    with pytest.raises(ConfigError, match="dts_alpha_mib_per_core = -1"):
        parse_config({"scaling": {"dts_alpha_mib_per_core": -1.0}})
    (problem,) = check_scaling(ScalingConfig(dts_alpha_mib_per_core=math.inf))
    assert "dts_alpha_mib_per_core" in problem
    assert "default 64" in problem

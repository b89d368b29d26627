"""Baselines and ablations behind the planner's interface, chosen by name."""

from __future__ import annotations

import math

import msgspec
import pytest

from infless.scaling.baselines import POLICIES, get_policy, uniform_config
from infless.scaling.config import POLICY_NAMES, ScalingConfig, check_scaling
from infless.scaling.demand import Demand
from infless.scaling.predictors import AnalyticModel, AnalyticPredictor
from infless.scaling.view import FunctionView, InstanceState, InstanceView, PoolView, ServerView
from infless.types import InstanceConfig

PRED = AnalyticPredictor({"m": AnalyticModel(2.0, 8.0)})
CFG = ScalingConfig()
SERVERS = tuple(ServerView(f"s{k}", 16, 16) for k in range(8))


def fn(*instances: InstanceView, max_batch: int = 32) -> FunctionView:
    return FunctionView("f", "m", 50.0, max_batch, instances=instances)


def test_every_configured_name_has_a_policy() -> None:
    assert tuple(POLICIES) == POLICY_NAMES
    with pytest.raises(ValueError, match="openfaas\\+"):
        get_policy("openfaas")


def test_openfaas_plus_is_one_request_per_instance_with_fixed_resources() -> None:
    result = get_policy("openfaas+")(PoolView(SERVERS, (fn(),)), Demand({"f": 500.0}), PRED, CFG)
    configs = {s.config for s in result.starts}
    assert configs == {InstanceConfig(1, CFG.baseline_cpus, 0)}
    r_up = result.starts[0].r_up_rps
    assert len(result.starts) == math.ceil(500.0 * 1.1 / r_up)
    assert all(s.batch_timeout_ms == 0 for s in result.starts)


def test_batch_uses_one_offline_batch_size_and_its_timeout() -> None:
    result = get_policy("batch")(PoolView(SERVERS, (fn(),)), Demand({"f": 900.0}), PRED, CFG)
    (config,) = {s.config for s in result.starts}
    assert config.batch_size > 1
    assert config.cpus == CFG.baseline_cpus
    exec_ms = PRED.predict_latency_ms("m", config.batch_size, config.cpus)
    assert exec_ms <= 25.0  # the largest batch that is feasible at the fixed resources
    assert PRED.predict_latency_ms("m", config.batch_size * 2, config.cpus) > 25.0
    assert result.starts[0].batch_timeout_ms == pytest.approx(50.0 - exec_ms)
    fixed = ScalingConfig(batch_baseline_size=4)
    chosen = uniform_config(fn(), PRED, fixed, True, 16, False)
    assert chosen is not None
    assert chosen[0].batch_size == 4


def test_uniform_shares_fill_instances_in_start_order() -> None:
    live = tuple(
        InstanceView(f"i{k}", "f", "s0", InstanceConfig(1, 2), started_s=float(k)) for k in range(3)
    )
    result = get_policy("openfaas+")(
        PoolView(SERVERS, (fn(*live),)), Demand({"f": 100.0}), PRED, CFG
    )
    shares = {s.instance_id: s.share_rps for s in result.shares}
    assert shares["i0"] == min(100.0, result_r_up())
    assert shares["i2"] == 0.0


def result_r_up() -> float:
    chosen = uniform_config(fn(), PRED, CFG, False, 16, False)
    assert chosen is not None
    return chosen[1].r_up_rps


def test_keep_alive_stops_idle_surplus_instances_only_after_300_s() -> None:
    live = (
        InstanceView("busy", "f", "s0", InstanceConfig(1, 2), started_s=0.0),
        InstanceView("idle", "f", "s0", InstanceConfig(1, 2), started_s=1.0, idle_since_s=100.0),
    )
    policy = get_policy("openfaas+")
    early = policy(PoolView(SERVERS, (fn(*live),), now_s=399.0), Demand({"f": 10.0}), PRED, CFG)
    assert early.stops == ()
    late = policy(PoolView(SERVERS, (fn(*live),), now_s=400.0), Demand({"f": 10.0}), PRED, CFG)
    assert [(s.instance_id, s.reason) for s in late.stops] == [("idle", "keep-alive")]


def test_nobatch_ablation_only_starts_batch_one() -> None:
    result = get_policy("infless-nobatch")(
        PoolView(SERVERS, (fn(),)), Demand({"f": 3000.0}), PRED, CFG
    )
    assert result.starts
    assert {s.config.batch_size for s in result.starts} == {1}


def test_nors_ablation_always_takes_the_max_throughput_resources() -> None:
    result = get_policy("infless-nors")(PoolView(SERVERS, (fn(),)), Demand({"f": 50.0}), PRED, CFG)
    assert {s.config.cpus for s in result.starts} == {16}
    normal = get_policy("infless")(PoolView(SERVERS, (fn(),)), Demand({"f": 50.0}), PRED, CFG)
    assert max(s.config.cpus for s in normal.starts) < 16


def test_inflated_predictions_need_more_resources() -> None:
    view = PoolView(SERVERS, (fn(),))
    cores = {
        name: sum(
            s.config.cpus for s in get_policy(name)(view, Demand({"f": 2000.0}), PRED, CFG).starts
        )
        for name in ("infless", "infless-x1.5", "infless-x2")
    }
    assert cores["infless"] <= cores["infless-x1.5"] <= cores["infless-x2"]
    assert cores["infless"] < cores["infless-x2"]


def test_config_checks_name_the_key_and_the_fix() -> None:
    assert check_scaling(ScalingConfig()) == []
    problems = check_scaling(ScalingConfig(policy="nope", alpha=1.5, cpu_options=()))
    assert any("scaling.policy = 'nope'" in p and "openfaas+" in p for p in problems)
    assert any("scaling.alpha = 1.5" in p for p in problems)
    assert any("scaling.cpu_options" in p for p in problems)
    assert ScalingConfig().beta == pytest.approx(64 / 142)


def test_config_loads_from_toml_like_data_and_refuses_unknown_keys() -> None:
    cfg = msgspec.convert(
        {"policy": "batch", "cpu_options": [1, 2], "demand": {"short_window_s": 1.0}},
        type=ScalingConfig,
    )
    assert cfg.cpu_options == (1, 2)
    assert cfg.demand.short_window_s == 1.0
    with pytest.raises(msgspec.ValidationError, match="alfa"):
        msgspec.convert({"alfa": 0.5}, type=ScalingConfig)


def test_uniform_policies_replace_the_pools_measuring_instance() -> None:
    """The pool's first instance batches (INFless-style); openfaas+ plans around it, lets it
    serve until its own b = 1 instances are ready, then stops it."""
    first = InstanceView("first", "f", "s0", InstanceConfig(4, 1), started_s=0.0)
    policy = get_policy("openfaas+")
    alone = policy(PoolView(SERVERS, (fn(first),)), Demand({"f": 100.0}), PRED, CFG)
    assert alone.starts
    assert {s.config for s in alone.starts} == {InstanceConfig(1, 2, 0)}
    assert alone.stops == ()
    assert [(s.instance_id, s.share_rps) for s in alone.shares] == [("first", 100.0)]
    own = InstanceView("own", "f", "s0", InstanceConfig(1, 2), started_s=1.0)
    starting = InstanceView("new", "f", "s0", InstanceConfig(1, 2), InstanceState.STARTING)
    waiting = policy(PoolView(SERVERS, (fn(first, own, starting),)), Demand({"f": 1.0}), PRED, CFG)
    assert waiting.stops == ()
    done = policy(PoolView(SERVERS, (fn(first, own),)), Demand({"f": 1.0}), PRED, CFG)
    assert [(s.instance_id, s.reason) for s in done.stops] == [("first", "foreign")]
    assert "first" not in {s.instance_id for s in done.shares}


def test_batch_keeps_a_first_instance_on_its_fixed_resources_and_infless_keeps_any() -> None:
    first = InstanceView("first", "f", "s0", InstanceConfig(4, CFG.baseline_cpus), started_s=0.0)
    view = PoolView(SERVERS, (fn(first),))
    assert get_policy("batch")(view, Demand({"f": 1.0}), PRED, CFG).stops == ()
    own = InstanceView("own", "f", "s0", InstanceConfig(1, 1), started_s=1.0)
    both = PoolView(SERVERS, (fn(first, own),))
    for name in ("infless", "infless-x2"):
        assert all(
            s.reason != "foreign" for s in get_policy(name)(both, Demand({}), PRED, CFG).stops
        )
    nobatch = get_policy("infless-nobatch")(both, Demand({"f": 1.0}), PRED, CFG)
    assert [(s.instance_id, s.reason) for s in nobatch.stops] == [("first", "foreign")]


def test_a_replacement_may_use_the_cores_of_the_instance_it_replaces() -> None:
    first = InstanceView("first", "f", "s0", InstanceConfig(4, 1), started_s=0.0)
    full = (ServerView("s0", 2, 0),)  # the first instance and another function fill it
    cfg = ScalingConfig(baseline_cpus=1)
    result = get_policy("openfaas+")(PoolView(full, (fn(first),)), Demand({"f": 10.0}), PRED, cfg)
    assert [s.config for s in result.starts] == [InstanceConfig(1, 1, 0)]
    nobatch = get_policy("infless-nobatch")(
        PoolView(full, (fn(first),)), Demand({"f": 10.0}), PRED, cfg
    )
    assert [s.config.batch_size for s in nobatch.starts] == [1]
    assert sum(s.config.cpus for s in nobatch.starts) <= 1

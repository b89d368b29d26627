"""Latency feedback raises a function's demand while it misses (and a core is idle), decays
it after; young instances are not released unless demand fell or their owner retired them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from infless.scaling.config import FeedbackConfig, StabilityConfig
from infless.scaling.demand import Demand
from infless.scaling.feedback import next_pressure, pressed
from infless.scaling.shares import Regime
from infless.scaling.stability import Stability, hold
from infless.scaling.view import (
    FunctionDecision,
    FunctionView,
    InstanceView,
    PoolView,
    ScalingPlan,
    ServerView,
    SetShare,
    StopInstance,
)
from infless.types import InstanceConfig
from tests.support.plans import start_instance

CFG = FeedbackConfig()


def test_pressure_grows_while_p99_nears_the_slo_or_requests_are_refused() -> None:
    assert next_pressure(1.0, 45.0, 50.0, 0, CFG) == pytest.approx(1.0 + CFG.step)
    assert next_pressure(1.0, 10.0, 50.0, 3, CFG) == pytest.approx(1.0 + CFG.step)
    assert next_pressure(CFG.max_factor, 49.0, 50.0, 0, CFG) == CFG.max_factor


def test_pressure_holds_when_every_core_has_an_instance() -> None:
    assert next_pressure(1.5, 49.0, 50.0, 10, CFG, idle_cores=0) == 1.5
    assert next_pressure(1.5, 49.0, 50.0, 10, CFG, idle_cores=1) == pytest.approx(1.75)


def test_pressure_decays_when_fast_and_holds_in_between() -> None:
    assert next_pressure(2.0, 10.0, 50.0, 0, CFG) == pytest.approx(2.0 * CFG.decay)
    assert next_pressure(1.02, None, 50.0, 0, CFG) == 1.0  # never below 1
    assert next_pressure(2.0, 30.0, 50.0, 0, CFG) == 2.0  # between p99_low and p99_high
    off = FeedbackConfig(enabled=False)
    assert next_pressure(3.0, 49.0, 50.0, 5, off) == 1.0


def test_pressed_demand_multiplies_each_function() -> None:
    demand = Demand({"a": 100.0, "b": 10.0})
    assert pressed(demand, {"a": 1.0}) is demand
    assert pressed(demand, {"a": 2.0}).rates_rps == {"a": 200.0, "b": 10.0}


def _view(now_s: float, started_s: float) -> PoolView:
    instance = InstanceView("f-1", "f", "s", InstanceConfig(8, 1), started_s=started_s)
    function = FunctionView("f", "m", 50.0, 8, instances=(instance,))
    return PoolView((ServerView("s", 4, 3),), (function,), now_s)


def test_a_young_instance_is_kept_until_demand_falls() -> None:
    cfg = StabilityConfig(min_lifetime_s=30.0, fall_ratio=0.6)
    release = ScalingPlan((SetShare("f", "f-2", 5.0), StopInstance("f", "f-1", "release")))
    state = Stability()
    # first seen at 100 rps; released 5 s later while demand is 80: held
    _, state = hold(ScalingPlan(), _view(0.0, 0.0), Demand({"f": 100.0}), state, cfg)
    held, state = hold(release, _view(5.0, 0.0), Demand({"f": 80.0}), state, cfg)
    assert held.actions == (SetShare("f", "f-2", 5.0),)
    assert state.demand_at_start == {"f-1": 100.0}
    # demand fell below 60 % of what it was: the release goes through
    gone, _ = hold(release, _view(6.0, 0.0), Demand({"f": 50.0}), state, cfg)
    assert gone.actions == release.actions
    # or the instance has lived its minimum lifetime
    old, _ = hold(release, _view(31.0, 0.0), Demand({"f": 90.0}), state, cfg)
    assert old.actions == release.actions


def test_stops_over_the_maximum_are_never_held() -> None:
    cfg = StabilityConfig(min_lifetime_s=30.0)
    plan = ScalingPlan((StopInstance("f", "f-1", "over-max"),))
    kept, _ = hold(plan, _view(1.0, 0.0), Demand({"f": 100.0}), Stability(), cfg)
    assert kept.actions == plan.actions


def test_a_retired_function_releases_its_young_instance_at_once() -> None:
    cfg = StabilityConfig(min_lifetime_s=30.0, fall_ratio=0.6)
    plan = ScalingPlan((StopInstance("f", "f-1", "zero-demand"),))
    # started at zero demand (kept warm): its demand can never fall below 60 % of that
    _, state = hold(ScalingPlan(), _view(0.0, 0.0), Demand({}), Stability(), cfg)
    held, state = hold(plan, _view(5.0, 0.0), Demand({}), state, cfg)
    assert held.actions == ()
    # once its owner retires it (a model-less variant moved away from), the stop goes through
    retired = _view(5.0, 0.0)
    retired = PoolView(retired.servers, (replace(retired.functions[0], retired=True),), 5.0)
    gone, _ = hold(plan, retired, Demand({}), state, cfg)
    assert gone.actions == plan.actions


def test_an_upsize_stop_is_dropped_with_the_start_that_was_to_replace_it() -> None:
    cfg = StabilityConfig(downsize_after_s=30.0)
    start = start_instance(8, 1, server_id="s", exec_ms=20.0, r_low_rps=100.0)
    below = FunctionDecision(
        function="f",
        demand_rps=90.0,
        regime=Regime.BELOW,
        r_min_rps=100.0,
        r_max_rps=400.0,
        starting_rps=0.0,
        planned_rps=400.0,
        unmet_rps=10.0,
    )
    plan = ScalingPlan((start, StopInstance("f", "f-1", "upsize")), (below,))
    held, _ = hold(plan, _view(40.0, 0.0), Demand({"f": 90.0}), Stability(), cfg)
    assert held.actions == ()
    within = replace(below, regime=Regime.BAND)
    kept, _ = hold(
        replace(plan, decisions=(within,)), _view(40.0, 0.0), Demand({"f": 90.0}), Stability(), cfg
    )
    assert kept.actions == plan.actions

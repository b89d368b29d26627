"""No flapping: an instance is not released within a minimum lifetime unless demand has fallen,
and a function is not resized downwards on one tick's evidence.

The planner decides from the estimates of the moment; a burst that passes, a share that
shifts, or measured service times that wander (which move every instance's [r_low, r_up])
can make it release an instance it started seconds earlier, or replace underfed instances by
smaller ones ("downsize") and back. `hold` filters a plan:
- a release (`StopInstance` for "release", "zero-demand" or "keep-alive") of an instance
  younger than `min_lifetime_s` is dropped unless the function's demand is now below
  `fall_ratio` × its demand when the instance was first seen (stops for being over the
  function's maximum always go through, and so do those of a function its owner has
  `retired` — a model-less variant moved away from, whose cores the new variant needs: an
  instance kept warm at zero demand could otherwise never see its demand "fall");
- starts planned while the function's demand is below its band (the downsize, which
  adds no capacity) are dropped until the function has been below the band for
  `downsize_after_s` — and with them the stop of an instance they were to replace
  (`upsize`), which must not go alone.
`Stability` remembers each instance's demand at start and since when each function has been
below its band. Pure: no I/O, no clock (the view carries `now`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from infless.scaling.config import StabilityConfig
from infless.scaling.demand import Demand
from infless.scaling.shares import Regime
from infless.scaling.view import PoolView, ScalingPlan, StartInstance, StopInstance

HELD_REASONS = frozenset({"release", "zero-demand", "keep-alive"})


@dataclass(frozen=True, slots=True)
class Stability:
    demand_at_start: dict[str, float] = field(default_factory=dict)  # instance id -> rps
    below_since_s: dict[str, float] = field(default_factory=dict)  # function -> time


def hold(
    plan: ScalingPlan, view: PoolView, demand: Demand, state: Stability, cfg: StabilityConfig
) -> tuple[ScalingPlan, Stability]:
    """The plan without the releases the minimum lifetime holds back, and the new state."""
    seen: dict[str, float] = {}
    started: dict[str, tuple[str, float]] = {}
    retired = {f.name for f in view.functions if f.retired}
    for view_of in view.functions:
        rate = demand.rate_rps(view_of.name)
        for instance in view_of.instances:
            seen[instance.instance_id] = state.demand_at_start.get(instance.instance_id, rate)
            started[instance.instance_id] = (view_of.name, instance.started_s)
    below: dict[str, float] = {}
    for decision in plan.decisions:
        if decision.regime is Regime.BELOW:
            below[decision.function] = state.below_since_s.get(decision.function, view.now_s)
    kept = []
    downsized: set[str] = set()
    held_starts: set[str] = set()  # functions whose starts are dropped this pass

    def held(stop: StopInstance) -> bool:
        if stop.reason == "upsize":  # goes only with the start that replaces it
            return stop.function in held_starts
        if stop.reason not in HELD_REASONS:
            return False
        name, started_s = started.get(stop.instance_id, ("", -1e18))
        young = view.now_s - started_s < cfg.min_lifetime_s
        fallen = demand.rate_rps(name) < cfg.fall_ratio * seen.get(stop.instance_id, 0.0)
        return young and not fallen and name not in retired

    for action in plan.actions:
        if isinstance(action, StartInstance) and action.function in below:
            if view.now_s - below[action.function] < cfg.downsize_after_s:
                held_starts.add(action.function)
                continue
            downsized.add(action.function)
        if isinstance(action, StopInstance) and held(action):
            continue
        kept.append(action)
    for name in downsized:  # the next downsize waits its turn again
        below[name] = view.now_s
    if len(kept) == len(plan.actions):
        return plan, Stability(seen, below)
    return ScalingPlan(tuple(kept), plan.decisions), Stability(seen, below)

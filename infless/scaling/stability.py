"""No flapping: an instance is not released within a minimum lifetime unless demand has fallen.

The planner decides from the demand estimate of the moment; a burst that passes, a share
that shifts or a smaller configuration that now fits can make it release an instance it
started seconds earlier — and start another the next time the estimate rises. `hold` filters
a plan: a release (`StopInstance` for "release", "zero-demand" or "keep-alive") of an
instance younger than `min_lifetime_s` is dropped unless the function's demand is now below
`fall_ratio` × the demand when the instance was first seen. Stops for being over the
function's maximum always go through. `Stability` remembers each instance's demand at
start. Pure: no I/O, no clock (the view carries `now`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from infless.scaling.config import StabilityConfig
from infless.scaling.demand import Demand
from infless.scaling.view import PoolView, ScalingPlan, StopInstance

HELD_REASONS = frozenset({"release", "zero-demand", "keep-alive"})


@dataclass(frozen=True, slots=True)
class Stability:
    demand_at_start: dict[str, float] = field(default_factory=dict)  # instance id -> rps


def hold(
    plan: ScalingPlan, view: PoolView, demand: Demand, state: Stability, cfg: StabilityConfig
) -> tuple[ScalingPlan, Stability]:
    """The plan without the releases the minimum lifetime holds back, and the new state."""
    seen: dict[str, float] = {}
    started: dict[str, tuple[str, float]] = {}
    for view_of in view.functions:
        rate = demand.rate_rps(view_of.name)
        for instance in view_of.instances:
            seen[instance.instance_id] = state.demand_at_start.get(instance.instance_id, rate)
            started[instance.instance_id] = (view_of.name, instance.started_s)
    kept = []
    for action in plan.actions:
        if isinstance(action, StopInstance) and action.reason in HELD_REASONS:
            name, started_s = started.get(action.instance_id, ("", -1e18))
            young = view.now_s - started_s < cfg.min_lifetime_s
            fallen = demand.rate_rps(name) < cfg.fall_ratio * seen.get(action.instance_id, 0.0)
            if young and not fallen:
                continue
        kept.append(action)
    if len(kept) == len(plan.actions):
        return plan, Stability(seen)
    return ScalingPlan(tuple(kept), plan.decisions), Stability(seen)

"""The prewarm manager's per-function lifecycle decision: keep, release, prewarm or nothing.

Owns: `LifecycleAction`, `LifecycleDecision` and `decide_lifecycle`, which maps a function's
idle start, its current `Windows`, whether it has warm instances and its floor (scale to zero
allowed, min instances) at time `now_s` to the action to take now and the time of the next
decision point. The server's prewarm manager calls it on every tick or timer and applies
the action to the pool; the offline replay uses the same window semantics.

Pure: no I/O, no clock, no pool access.

Timeline after the idle start t0 (end of the last execution) with windows (pw, ka):
    [t0, t0 + pw)            unloaded   (empty when pw == 0: the instance is never unloaded)
    [t0 + pw, t0 + pw + ka)  loaded     (prewarm at t0 + pw if nothing is warm)
    [t0 + pw + ka, ...)      unloaded   until the next request
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from infless.coldstart.policies import Windows


class LifecycleAction(Enum):
    KEEP = "keep"  # warm instances should stay
    RELEASE_TO_ZERO = "release_to_zero"  # release every instance of the function
    PREWARM = "prewarm"  # start one instance now, before the predicted next request
    NONE = "none"  # nothing is warm and nothing should be


@dataclass(frozen=True, slots=True)
class LifecycleDecision:
    action: LifecycleAction
    # When to call `decide_lifecycle` again if no request arrives (absolute, same scale as
    # `now_s`); None: nothing is scheduled, only a request (or a config change) changes it.
    next_decision_s: float | None


def decide_lifecycle(
    *,
    idle_since_s: float | None,
    windows: Windows,
    has_warm_instances: bool,
    scale_to_zero: bool,
    min_instances: int,
    now_s: float,
    release_grace_s: float = 0.0,
) -> LifecycleDecision:
    """Decide what the function's instances should do at `now_s`.

    `idle_since_s`: end of the last execution (or the deployment time of a function that has
    instances but never ran); None while a request is in flight or before any instance
    existed. `windows`: the policy's output at that execution's end. If scale to zero is not
    allowed the floor is max(min_instances, 1), else min_instances; with a floor above zero
    the function is never released (extra instances are the autoscaler's business) and is
    prewarmed when nothing is warm. `release_grace_s` delays the release that a positive
    pre-warm window asks for right after an execution (0 = literal HHP/LSTH).
    """
    if min_instances < 0:
        raise ValueError(f"min_instances={min_instances}: must be >= 0")
    if release_grace_s < 0:
        raise ValueError(f"release_grace_s={release_grace_s}: must be >= 0")
    floor = min_instances if scale_to_zero else max(min_instances, 1)
    if floor > 0 or idle_since_s is None:
        # a floor above zero: never release; no idle period (busy, or nothing deployed yet):
        # keep what is warm. Neither needs a timer.
        if floor > 0:
            return LifecycleDecision(_action(True, has_warm_instances), None)
        action = LifecycleAction.KEEP if has_warm_instances else LifecycleAction.NONE
        return LifecycleDecision(action, None)

    load_at_s = idle_since_s + windows.prewarm_s
    release_at_s = load_at_s + windows.keepalive_s
    if now_s < load_at_s:  # inside the pre-warm window: should be unloaded
        grace_end_s = idle_since_s + release_grace_s
        if has_warm_instances and now_s < grace_end_s:
            return LifecycleDecision(LifecycleAction.KEEP, min(grace_end_s, load_at_s))
        should_be_loaded, next_s = False, load_at_s
    elif now_s < release_at_s:  # inside the keep-alive window: should be loaded
        should_be_loaded, next_s = True, release_at_s
    else:  # past the keep-alive window: unloaded until the next request
        should_be_loaded, next_s = False, None
    return LifecycleDecision(_action(should_be_loaded, has_warm_instances), next_s)


def _action(should_be_loaded: bool, has_warm_instances: bool) -> LifecycleAction:
    if should_be_loaded:
        return LifecycleAction.KEEP if has_warm_instances else LifecycleAction.PREWARM
    return LifecycleAction.RELEASE_TO_ZERO if has_warm_instances else LifecycleAction.NONE

"""PrewarmManager: the shell of the cold-start policy (INFless §3.5), behind the scaling port.

On every `tick` it reads the target's snapshot and feeds each scale-to-zero function's new
idle-ending arrivals to the policy. It recomputes the windows once per idle period and asks
`decide_lifecycle` what to do:

- `ReleaseToZero` when the keep-alive window ends;
- `Prewarm` (start one instance) at the prewarm point, early by the function's last
  measured start time, so the instance is ready before the predicted next request.

The plan goes back to the target, which applies it to the desired state. A release makes
the cold-start policy the function's owner until it wakes (`control.desired`). Functions
that may not scale to zero are left alone. It reads no clock and never sees instances: the
server's pool and the simulator both run this same object.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from infless.coldstart.lifecycle import LifecycleAction, decide_lifecycle
from infless.coldstart.policies import ColdStartPolicy, Windows
from infless.coldstart.views import ColdStartView
from infless.control.desired import Owner
from infless.control.port import FunctionState, ScalingTarget
from infless.scaling.view import Action, Prewarm, ReleaseToZero, ScalingPlan

log = logging.getLogger(__name__)

_LOADED = (LifecycleAction.KEEP, LifecycleAction.PREWARM)


@dataclass
class _Tracked:
    state: Any
    windows: Windows
    seen_idle_arrivals: int = 0
    decided_for_idle_s: float | None = None
    releases: int = 0
    prewarms: int = 0


class PrewarmManager:
    def __init__(
        self,
        target: ScalingTarget,
        policy: ColdStartPolicy[Any],
        release_grace_s: float,
        scale_to_zero_default: bool,
    ) -> None:
        self._target = target
        self._policy = policy
        self._grace_s = release_grace_s
        self._zero_default = scale_to_zero_default
        self._tracked: dict[str, _Tracked] = {}

    def describe(self, name: str) -> ColdStartView | None:
        """The function's current windows and what the manager did, for /system/function."""
        tracked = self._tracked.get(name)
        if tracked is None:
            return None
        return ColdStartView(
            policy=self._policy.name,
            prewarm_s=round(tracked.windows.prewarm_s, 3),
            keepalive_s=round(tracked.windows.keepalive_s, 3),
            releases=tracked.releases,
            prewarms=tracked.prewarms,
        )

    def tick(self) -> ScalingPlan:
        snapshot = self._target.snapshot()
        names = {f.name for f in snapshot.functions}
        for name in [n for n in self._tracked if n not in names]:
            del self._tracked[name]
        actions: list[Action] = []
        for function in snapshot.functions:
            allowed = function.scale_to_zero
            if self._zero_default if allowed is None else allowed:
                action = self._manage(function, snapshot.now_s)
                if action is not None:
                    actions.append(action)
        plan = ScalingPlan(tuple(actions))
        if actions:
            self._target.apply(plan)
        return plan

    def _track(self, function: FunctionState, now: float) -> _Tracked:
        tracked = self._tracked.get(function.name)
        if tracked is None:
            # Windows for a function that never ran yet; the state stays fresh so that the
            # first request is not mistaken for the end of an idle period.
            state = self._policy.initial_state()
            windows, _ = self._policy.decide(state, now)
            seen = function.activity.idle_arrival_count
            tracked = self._tracked[function.name] = _Tracked(state, windows, seen)
        return tracked

    def _manage(self, function: FunctionState, now: float) -> Action | None:
        tracked = self._track(function, now)
        activity = function.activity
        new = activity.idle_arrival_count - tracked.seen_idle_arrivals
        if new > 0:
            for arrival_s in activity.idle_arrivals[-new:]:
                tracked.state = self._policy.observe(tracked.state, arrival_s)
        tracked.seen_idle_arrivals = activity.idle_arrival_count
        idle_since = activity.idle_since_s if activity.outstanding == 0 else None
        finished_s = activity.last_finish_s
        new_idle = finished_s is not None and tracked.decided_for_idle_s != finished_s
        if idle_since is not None and finished_s is not None and new_idle:
            tracked.windows, tracked.state = self._policy.decide(tracked.state, finished_s)
            tracked.decided_for_idle_s = finished_s
        live = function.live > 0

        def decide_at(at_s: float) -> LifecycleAction:
            return decide_lifecycle(
                idle_since_s=idle_since,
                windows=tracked.windows,
                has_warm_instances=live,
                scale_to_zero=True,
                min_instances=0,
                now_s=at_s,
                release_grace_s=self._grace_s,
            ).action

        # Warm when busy, when the policy wants an instance loaded now, or soon enough that
        # one must start now (the lead is the function's last measured start time).
        lead_s = function.start_s
        warm = idle_since is None or decide_at(now) in _LOADED or decide_at(now + lead_s) in _LOADED
        if warm and not live:
            log.info("prewarming %s (a request is expected within %.1f s)", function.name, lead_s)
            tracked.prewarms += 1
            return Prewarm(function.name, lead_s)
        if not warm and live and function.owner is not Owner.COLDSTART:
            idle_s = now - (idle_since or now)
            log.info("releasing %s to zero (idle for %.1f s)", function.name, idle_s)
            tracked.releases += 1
            return ReleaseToZero(function.name, idle_s)
        return None

"""PrewarmManager: the server side of the cold-start policy (INFless §3.5), on the clock.

Every tick it feeds each scale-to-zero function's idle-ending arrivals to the policy,
recomputes the windows once per idle period, and asks `decide_lifecycle` what to do:
release the function's instances when the keep-alive window ends, or start one at the
prewarm point — early by the function's last measured start time, so the instance is ready
before the predicted next request. Functions that may not scale to zero are left alone.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from infless.clock import Clock, Ticker
from infless.coldstart.lifecycle import LifecycleAction, decide_lifecycle
from infless.coldstart.policies import ColdStartPolicy, Windows
from infless.dataplane.instance import InstanceState
from infless.workers.pool import DeployedFunction, WorkerPool

log = logging.getLogger(__name__)

SCALE_ZERO_LABEL = "com.openfaas.scale.zero"


@dataclass
class _Tracked:
    state: Any
    windows: Windows
    decided_for_idle_s: float | None = None
    releases: int = 0
    prewarms: int = 0


def scale_to_zero_allowed(function: DeployedFunction, default: bool) -> bool:
    label = function.spec.labels.get(SCALE_ZERO_LABEL)
    return default if label is None else label.strip().lower() == "true"


class PrewarmManager:
    def __init__(
        self,
        pool: WorkerPool,
        clock: Clock,
        policy: ColdStartPolicy[Any],
        tick_s: float,
        release_grace_s: float,
        scale_to_zero_default: bool,
    ) -> None:
        self._pool = pool
        self._clock = clock
        self._policy = policy
        self._tick_s = tick_s
        self._grace_s = release_grace_s
        self._zero_default = scale_to_zero_default
        self._tracked: dict[str, _Tracked] = {}
        self._ticker = Ticker(clock, tick_s, self.tick, "prewarm-manager")

    def start(self) -> None:
        self._ticker.start()

    async def stop(self) -> None:
        await self._ticker.stop()

    def describe(self, name: str) -> dict[str, object] | None:
        """The function's current windows and what the manager did, for /system/function."""
        tracked = self._tracked.get(name)
        if tracked is None:
            return None
        return {
            "policy": self._policy.name,
            "prewarmS": round(tracked.windows.prewarm_s, 3),
            "keepaliveS": round(tracked.windows.keepalive_s, 3),
            "releases": tracked.releases,
            "prewarms": tracked.prewarms,
        }

    def tick(self) -> None:
        now = self._clock.now()
        for name in [n for n in self._tracked if n not in self._pool.functions]:
            del self._tracked[name]
        for name, function in self._pool.functions.items():
            if scale_to_zero_allowed(function, self._zero_default):
                self._manage(name, function, now)

    def _manage(self, name: str, function: DeployedFunction, now: float) -> None:
        activity = function.activity
        tracked = self._tracked.get(name)
        if tracked is None:
            # Windows for a function that never ran yet; the state stays fresh so that the
            # first request is not mistaken for the end of an idle period.
            state = self._policy.initial_state()
            windows, _ = self._policy.decide(state, now)
            tracked = self._tracked[name] = _Tracked(state, windows)
        for arrival_s in activity.drain_arrivals():
            tracked.state = self._policy.observe(tracked.state, arrival_s)
        idle_since = activity.idle_since_s if activity.outstanding == 0 else None
        finished_s = activity.last_finish_s
        if (
            idle_since is not None
            and finished_s is not None
            and (tracked.decided_for_idle_s != finished_s)
        ):
            tracked.windows, tracked.state = self._policy.decide(tracked.state, finished_s)
            tracked.decided_for_idle_s = finished_s
        live = [
            i
            for i in function.router.instances
            if i.state in (InstanceState.STARTING, InstanceState.READY)
        ]

        def decide_at(at_s: float) -> LifecycleAction:
            return decide_lifecycle(
                idle_since_s=idle_since,
                windows=tracked.windows,
                has_warm_instances=bool(live),
                scale_to_zero=True,
                min_instances=0,
                now_s=at_s,
                release_grace_s=self._grace_s,
            ).action

        # Warm when busy, when the policy wants an instance loaded now, or soon enough that
        # one must start now (the lead is the function's last measured start time).
        loaded = (LifecycleAction.KEEP, LifecycleAction.PREWARM)
        lead_s = function.last_start_duration_s
        warm = idle_since is None or decide_at(now) in loaded or decide_at(now + lead_s) in loaded
        if warm and not live:
            log.info("prewarming %s (a request is expected within %.1f s)", name, lead_s)
            tracked.prewarms += 1
        elif not warm and live and function.keep_warm:
            log.info("releasing %s to zero (idle for %.1f s)", name, now - (idle_since or now))
            tracked.releases += 1
        if warm != function.keep_warm or (warm and not live):
            self._pool.set_warm(name, warm)

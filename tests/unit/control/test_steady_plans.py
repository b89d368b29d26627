"""Under a steady rate the real autoscaler settles, even while measured service times swing.

A fake scaling target serves the autoscaler a steady arrival rate and instances whose
measured service times swing between ×1 and ×1.6 every 1.5 s (as they do when a neighbour
comes and goes on a shared core), which moves every instance's [r_low, r_up] and makes the
planner replace instances by smaller or larger ones. Without the stability rules it keeps
doing so (the control runs); with them it settles."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from infless.control import desired as d
from infless.control.autoscaler import Autoscaler
from infless.control.port import ActivityView, FunctionState, Measured, Snapshot
from infless.scaling.config import ScalingConfig, StabilityConfig
from infless.scaling.view import (
    FunctionView,
    InstanceState,
    InstanceView,
    ScalingPlan,
    ServerView,
    StartInstance,
)
from infless.types import InstanceConfig

TICK_S = 0.5


def service_ms(batch_size: int, cpus: int) -> float:
    return float((4.0 + 2.0 * batch_size) / cpus**0.7)


class Mint:
    def __init__(self) -> None:
        self._ids = itertools.count()

    def uniform(self) -> d.WantedInstance:
        return d.WantedInstance(f"f-{next(self._ids)}", InstanceConfig(16, 1), fixed_batch=False)

    def planned(self, start: StartInstance) -> d.WantedInstance:
        return d.planned_instance(f"f-{next(self._ids)}", start)

    def moved(self, entry: d.WantedInstance) -> d.WantedInstance:
        return replace(entry, instance_id=f"f-{next(self._ids)}", server_id="s2")


class SwingingTarget:
    """A server whose wanted instances are ready at once and measure swinging times."""

    def __init__(self, rate_rps: float, swing: float) -> None:
        self.now_s = 0.0
        self._rate_rps, self._swing = rate_rps, swing
        self.arrivals = 0
        self._mint = Mint()
        self.desired = d.initial(d.DesiredState(d.Owner.AUTOSCALER), self._mint, count=1)
        self._started = {w.instance_id: 0.0 for w in self.desired.instances}
        self.starts = self.stops = 0

    def step(self) -> None:
        self.now_s += TICK_S
        self.arrivals += round(self._rate_rps * TICK_S)

    def _factor(self) -> float:
        return self._swing if int(self.now_s / TICK_S) % 6 >= 3 else 1.0

    def snapshot(self) -> Snapshot:
        f = self._factor()
        wanted = self.desired.instances
        instances = tuple(
            InstanceView(
                w.instance_id,
                "f",
                "s",
                w.config,
                InstanceState.READY,
                service_ms(w.config.batch_size, w.config.cpus) * f,
                self._started[w.instance_id],
            )
            for w in wanted
        )
        measured = tuple(
            Measured(w.config.cpus, {b: service_ms(b, w.config.cpus) * f for b in (1, 4, 16)})
            for w in wanted
        )
        view = FunctionView("f", "m", 100.0, 16, 1, 8, instances=instances)
        state = FunctionState(
            view, self.desired.owner, self.arrivals, None, ActivityView(), 0.0, measured
        )
        used = sum(w.config.cpus for w in wanted)
        return Snapshot((ServerView("s", 8, 8 - used),), (state,), self.now_s)

    def apply(self, plan: ScalingPlan) -> None:
        before = self.desired.ids()
        self.desired = d.applied(self.desired, self._mint, actions=list(plan.actions))
        after = self.desired.ids()
        for instance_id in after - before:
            self._started[instance_id] = self.now_s
        self.starts += len(after - before)
        self.stops += len(before - after)


def changes(stability: StabilityConfig, rate_rps: float) -> tuple[int, int]:
    """Starts and releases between 40 s and 120 s of a steady rate."""
    target = SwingingTarget(rate_rps, swing=1.6)
    autoscaler = Autoscaler(target, ScalingConfig(tick_s=TICK_S, stability=stability))
    settled = (0, 0)
    while target.now_s < 120.0:
        target.step()
        autoscaler.tick()
        if target.now_s == 40.0:
            settled = (target.starts, target.stops)
    return target.starts - settled[0], target.stops - settled[1]


@pytest.mark.parametrize("rate_rps", [300.0, 500.0, 800.0])
def test_a_steady_rate_settles_although_measured_times_swing(rate_rps: float) -> None:
    flapping = changes(StabilityConfig(min_lifetime_s=0.0, downsize_after_s=0.0), rate_rps)
    assert min(flapping) >= 20  # the control: without the rules, a change every few seconds
    starts, releases = changes(StabilityConfig(), rate_rps)
    assert starts <= 4  # in 80 s: at most one change every 20 s
    assert releases <= 4

"""The latency feedback presses a function's demand up only on a p99 that new answers moved:
a function that stopped getting traffic (a model-less variant moved away from) still shows
the p99 of its last seconds, and must not have its demand multiplied on it tick after tick."""

from __future__ import annotations

from infless.control.autoscaler import Autoscaler
from infless.control.desired import Owner
from infless.control.port import FunctionState, Snapshot
from infless.scaling.config import ScalingConfig
from infless.scaling.view import FunctionView, ScalingPlan, ServerView

TICK_S = 0.5


class Target:
    """One function on a 4-core server with idle cores, whose p99 sits over 0.8 × its SLO."""

    def __init__(self) -> None:
        self.now_s = 0.0
        self.answered = 0
        self.answers_per_tick = 0

    def snapshot(self) -> Snapshot:
        self.answered += self.answers_per_tick
        state = FunctionState(
            FunctionView("f", "m", 100.0, 8),
            Owner.AUTOSCALER,
            round(100.0 * self.now_s),
            None,
            p99_ms=90.0,
            answered=self.answered,
        )
        server = ServerView("s", 4, 4, idle_cores=4)
        return Snapshot((server,), (state,), self.now_s)

    def apply(self, plan: ScalingPlan) -> None:
        pass


def pressure_after(scaler: Autoscaler, target: Target, ticks: int) -> float:
    for _ in range(ticks):
        target.now_s += TICK_S
        scaler.tick()
    return scaler.pressure["f"]


def test_a_p99_without_new_answers_does_not_press_the_demand_up() -> None:
    target = Target()
    scaler = Autoscaler(target, ScalingConfig(tick_s=TICK_S))
    target.answers_per_tick = 30
    pressed = pressure_after(scaler, target, 4)
    assert pressed == 2.0  # four ticks of fresh answers over the SLO's 0.8: 1 + 4 × 0.25
    target.answers_per_tick = 0
    stale = pressure_after(scaler, target, 4)
    assert stale < pressed  # a stale p99 is unknown: the factor decays
    target.answers_per_tick = 30
    assert pressure_after(scaler, target, 1) == stale + 0.25  # fresh answers press again

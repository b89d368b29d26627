"""The autoscaler keeps each function's last decision, says each new unpriced reason once, and
learns GPU instances' measured times at their share."""

from __future__ import annotations

import logging

import pytest

from infless.control.autoscaler import Autoscaler
from infless.control.desired import Owner
from infless.control.port import FunctionState, Measured, Snapshot
from infless.profiler.database import GpuLatencyRow
from infless.scaling.config import ScalingConfig
from infless.scaling.gpu_profiles import GpuProfilePredictor
from infless.scaling.measured import MeasuredPredictor
from infless.scaling.predictors import LatencyPredictor
from infless.scaling.shares import Regime
from infless.scaling.view import FunctionView, ScalingPlan, ServerView

H100 = "NVIDIA H100 80GB HBM3"
TICK_S = 0.5


class Target:
    """One GPU server and functions whose arrivals grow by `rate_rps` per second."""

    def __init__(self, names: tuple[str, ...], rate_rps: float = 100.0) -> None:
        self.now_s, self.rate_rps = 0.0, rate_rps
        self.names = names
        self.owner = Owner.AUTOSCALER
        self.measured: tuple[Measured, ...] = (Measured(1, {1: 10.0, 4: 16.0}),)
        self.plans: list[ScalingPlan] = []

    def snapshot(self) -> Snapshot:
        arrivals = round(self.rate_rps * self.now_s)
        functions = tuple(
            FunctionState(
                FunctionView(name, "m", 100.0, 8),
                self.owner,
                arrivals,
                None,
                measured=self.measured,
            )
            for name in self.names
        )
        server = ServerView("g", 8, 8, (100, 100), (100, 100))
        return Snapshot((server,), functions, self.now_s)

    def apply(self, plan: ScalingPlan) -> None:
        self.plans.append(plan)


def autoscaler(target: Target, rows: list[GpuLatencyRow]) -> Autoscaler:
    def profiles(keys: frozenset[str]) -> LatencyPredictor:
        return GpuProfilePredictor(rows, [H100])

    return Autoscaler(target, ScalingConfig(tick_s=TICK_S), profiles=profiles)


def ticks(scaler: Autoscaler, target: Target, n: int) -> None:
    for _ in range(n):
        target.now_s += TICK_S
        scaler.tick()


def test_the_last_decision_is_kept_and_an_unpriced_reason_is_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    target = Target(("f",))
    scaler = autoscaler(target, [])
    assert scaler.decision("f") is None
    with caplog.at_level(logging.WARNING, logger="infless.control.autoscaler"):
        ticks(scaler, target, 4)
    decision = scaler.decision("f")
    assert decision is not None
    assert decision.demand_rps > 0
    assert decision.regime in set(Regime)
    gpu_configs = 4 * 4 * 6  # b in 1..8, c in 1..8, the six default shares
    assert decision.unpriced == (
        f"b8/c1/g10 and {gpu_configs - 1} more: no GPU profile of m on {H100} "
        "(run infless profile --gpu m)",
    )
    said = [r.getMessage() for r in caplog.records if "unpriced" in r.getMessage()]
    assert said == [f"autoscaler: f: unpriced {decision.unpriced[0]}"]


def test_with_a_gpu_profile_nothing_is_unpriced_and_a_share_is_planned() -> None:
    target = Target(("f",), rate_rps=2000.0)
    target.measured = (Measured(1, {1: 40.0, 4: 160.0}),)  # on a core b = 8 cannot fit 50 ms
    rows = [
        GpuLatencyRow(H100, "m", b, g, 1, 1.0 + b * 30.0 / g)
        for g in (10, 100)
        for b in (1, 2, 4, 8)
    ]
    scaler = autoscaler(target, rows)
    ticks(scaler, target, 4)
    decision = scaler.decision("f")
    assert decision is not None
    assert decision.unpriced == ()
    assert any(s.config.gpu_pct > 0 for p in target.plans for s in p.starts)


def test_decisions_of_functions_gone_or_handed_to_a_person_are_not_reported_as_new() -> None:
    target = Target(("f", "g"))
    scaler = autoscaler(target, [])
    ticks(scaler, target, 2)
    assert scaler.decision("g") is not None
    target.names = ("f",)
    ticks(scaler, target, 1)
    assert scaler.decision("g") is None  # removed: forgotten
    target.owner = Owner.MANUAL
    before = scaler.decision("f")
    ticks(scaler, target, 1)
    assert scaler.decision("f") == before  # not planned any more: the last decision stays


def test_gpu_instances_measured_times_price_their_own_share() -> None:
    target = Target(("f",))
    target.measured = (Measured(1, {1: 10.0, 4: 16.0}), Measured(2, {1: 0.5, 4: 0.8}, gpu_pct=30))
    scaler = autoscaler(target, [])
    ticks(scaler, target, 1)
    predictor = scaler.predictor
    assert isinstance(predictor, MeasuredPredictor)
    assert predictor.predict_latency_ms("m", 4, 1, 30) == 0.8
    assert predictor.predict_latency_ms("m", 4, 1) == 16.0
    with pytest.raises(LookupError, match="no GPU profile of m"):
        predictor.predict_latency_ms("m", 4, 1, 50)

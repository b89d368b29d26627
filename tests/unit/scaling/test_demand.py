"""Demand estimation: windows, burst attack, slow decay, sporadic loads, trends (fake clock)."""

from __future__ import annotations

import math

import pytest

from infless.scaling.config import DemandConfig
from infless.scaling.demand import (
    Demand,
    DemandState,
    estimate,
    forget,
    record,
    record_times,
    trend_rps_per_s,
    window_rate_rps,
)
from tests.support.clock import FakeClock

CFG = DemandConfig(trend_lookahead_s=0.0)


async def feed(
    state: DemandState, clock: FakeClock, rate_rps: float, seconds: float, cfg: DemandConfig = CFG
) -> DemandState:
    """Evenly spaced arrivals for `seconds`, recorded per 0.25-s step as the shell would."""
    step_s = 0.25
    per_step = rate_rps * step_s
    carried = 0.0
    for _ in range(round(seconds / step_s)):
        await clock.advance(step_s)
        carried += per_step
        count = math.floor(carried + 1e-9)
        carried -= count
        state = record(state, "f", count, clock.now() - 1e-6, cfg)
    return state


def rate_now(state: DemandState, clock: FakeClock, cfg: DemandConfig = CFG) -> float:
    demand, _ = estimate(state, clock.now(), cfg)
    return demand.rate_rps("f")


async def test_steady_rate_is_measured() -> None:
    clock = FakeClock(start=0.0)
    state = await feed(DemandState(), clock, 100.0, 40.0)
    assert rate_now(state, clock) == pytest.approx(100.0, rel=0.05)


async def test_a_new_function_is_not_underestimated_while_its_window_fills() -> None:
    clock = FakeClock(start=0.0)
    state = await feed(DemandState(), clock, 100.0, 1.0)
    assert rate_now(state, clock) == pytest.approx(100.0, rel=0.1)


async def test_burst_is_seen_within_the_short_window() -> None:
    clock = FakeClock(start=0.0)
    state = await feed(DemandState(), clock, 50.0, 40.0)
    state = await feed(state, clock, 500.0, CFG.short_window_s)
    assert rate_now(state, clock) == pytest.approx(500.0, rel=0.05)


async def test_after_a_burst_the_estimate_decays_slowly() -> None:
    clock = FakeClock(start=0.0)
    state = await feed(DemandState(), clock, 500.0, 10.0)
    peak, state = estimate(state, clock.now(), CFG)
    assert peak.rate_rps("f") == pytest.approx(500.0, rel=0.05)
    state = await feed(state, clock, 0.0, 5.0)
    later, _ = estimate(state, clock.now(), CFG)
    expected = peak.rate_rps("f") * math.exp(-5.0 / CFG.decay_tau_s)
    assert later.rate_rps("f") == pytest.approx(expected, rel=0.01)
    assert later.rate_rps("f") > 300.0  # not scaled in between two bursts


async def test_decay_applies_between_estimates_not_per_call() -> None:
    clock = FakeClock(start=0.0)
    state = await feed(DemandState(), clock, 200.0, 5.0)
    first, state = estimate(state, clock.now(), CFG)
    again, _ = estimate(state, clock.now(), CFG)  # same instant: no decay
    assert again.rate_rps("f") == pytest.approx(first.rate_rps("f"))


async def test_sporadic_load_keeps_a_long_window_rate() -> None:
    clock = FakeClock(start=0.0)
    state = DemandState()
    for _ in range(10):  # one request every 3 s
        await clock.advance(3.0)
        state = record(state, "f", 1, clock.now(), CFG)
    cfg = DemandConfig(decay_tau_s=0.001, trend_lookahead_s=0.0)  # no decayed peak
    await clock.advance(2.5)
    demand, _ = estimate(state, clock.now(), cfg)
    assert demand.rate_rps("f") == pytest.approx(10 / 30.0, rel=0.15)


def test_record_times_buckets_timestamps_in_any_order() -> None:
    state = record_times(DemandState(), "f", [0.9, 0.1, 0.5, 1.7], CFG)
    track = state.tracks["f"]
    assert sum(track.counts) == 4
    assert record_times(DemandState(), "f", [], CFG) == DemandState()


def test_old_buckets_are_dropped_and_very_late_reports_ignored() -> None:
    state = record(DemandState(), "f", 5, 0.0, CFG)
    state = record(state, "f", 5, 100.0, CFG)
    track = state.tracks["f"]
    assert len(track.counts) <= math.ceil(CFG.long_window_s / CFG.bucket_s) + 1
    assert sum(track.counts) == 5
    assert record(state, "f", 7, 1.0, CFG) == state


async def test_trend_extrapolates_a_ramp_beyond_poisson_noise() -> None:
    cfg = DemandConfig(trend_lookahead_s=2.0)
    clock = FakeClock(start=0.0)
    state = await feed(DemandState(), clock, 100.0, 20.0, cfg)
    for second in range(4):  # +500 RPS per second
        state = await feed(state, clock, 500.0 + 500.0 * second, 1.0, cfg)
    await clock.advance(0.01)  # the last whole bucket is complete
    growth = trend_rps_per_s(state.tracks["f"], clock.now(), cfg)
    # newer second 2000 arrivals, older 1500: 500 > 3·√3500 ≈ 177.5, a real ramp
    assert growth == pytest.approx(500.0, rel=0.02)
    plain = window_rate_rps(state.tracks["f"], cfg.short_window_s, clock.now(), cfg)
    ahead = rate_now(state, clock, cfg)
    # the 2-s window's mean lags its end by 1 s; plus the 2-s lookahead
    assert ahead == pytest.approx(plain + 3.0 * growth)


async def feed_and_estimate(
    state: DemandState, clock: FakeClock, rate_rps: float, seconds: float, cfg: DemandConfig
) -> tuple[DemandState, list[Demand]]:
    """`feed` in half-second ticks, estimating after each as the control loop does."""
    estimates: list[Demand] = []
    for _ in range(round(seconds / 0.5)):
        state = await feed(state, clock, rate_rps, 0.5, cfg)
        demand, state = estimate(state, clock.now() + 0.01, cfg)
        estimates.append(demand)
    return state, estimates


async def test_a_step_is_measured_as_the_new_rate_and_planned_for_ahead_of_it() -> None:
    cfg = DemandConfig(trend_lookahead_s=2.0)
    clock = FakeClock(start=0.0)
    state, _ = await feed_and_estimate(DemandState(), clock, 50.0, 20.0, cfg)
    _, after = await feed_and_estimate(state, clock, 500.0, 15.0, cfg)
    measured = [d.measured_rate_rps("f") for d in after]
    # the latest buckets once the rise is beyond noise: the new rate at the next tick,
    # never beyond it, for the whole peak
    assert min(measured) >= 500.0 * 0.95
    assert max(measured) <= 500.0 * 1.05
    # the planning rate reads the step as a steep ramp: capacity for the backlog it builds
    planned = [d.rate_rps("f") for d in after]
    assert max(planned) > 2 * 500.0
    assert all(p >= m for p, m in zip(planned, measured, strict=True))


async def test_the_measured_rate_holds_after_a_burst_and_decays() -> None:
    cfg = DemandConfig(trend_lookahead_s=2.0)
    clock = FakeClock(start=0.0)
    state, _ = await feed_and_estimate(DemandState(), clock, 400.0, 10.0, cfg)
    _, after = await feed_and_estimate(state, clock, 0.0, 5.0, cfg)
    expected = 400.0 * math.exp(-5.0 / cfg.decay_tau_s)
    assert after[-1].measured_rate_rps("f") == pytest.approx(expected, rel=0.05)


def test_a_demand_without_a_measurement_measures_its_planning_rate() -> None:
    demand = Demand({"f": 12.0})
    assert demand.measured_rate_rps("f") == 12.0
    assert Demand({"f": 12.0}, {"f": 5.0}).measured_rate_rps("f") == 5.0


async def test_a_small_growth_within_poisson_noise_is_no_trend() -> None:
    cfg = DemandConfig(trend_lookahead_s=2.0)
    clock = FakeClock(start=0.0)
    state = await feed(DemandState(), clock, 100.0, 20.0, cfg)
    state = await feed(state, clock, 120.0, 1.0, cfg)  # +20 < 3·√220 ≈ 44
    await clock.advance(0.01)
    assert trend_rps_per_s(state.tracks["f"], clock.now(), cfg) == 0.0


async def test_a_steady_noisy_rate_has_no_trend() -> None:
    cfg = DemandConfig(trend_lookahead_s=2.0)
    state = DemandState()
    for k in range(40):  # 200 RPS with ±10 % wobble per second
        state = record(state, "f", 220 if k % 2 else 180, k + 0.5, cfg)
    assert trend_rps_per_s(state.tracks["f"], 40.01, cfg) <= 0.0


async def test_a_falling_rate_has_no_negative_trend_bonus() -> None:
    cfg = DemandConfig(trend_lookahead_s=2.0, decay_tau_s=0.001)
    clock = FakeClock(start=0.0)
    state = await feed(DemandState(), clock, 400.0, 3.0, cfg)
    state = await feed(state, clock, 100.0, 1.0, cfg)
    plain = window_rate_rps(state.tracks["f"], cfg.short_window_s, clock.now(), cfg)
    assert trend_rps_per_s(state.tracks["f"], clock.now(), cfg) < 0
    assert rate_now(state, clock, cfg) >= plain


def test_functions_are_independent_and_can_be_forgotten() -> None:
    state = record(DemandState(), "a", 10, 1.0, CFG)
    state = record(state, "b", 1, 1.0, CFG)
    demand, state = estimate(state, 1.5, CFG)
    assert demand.rate_rps("a") > demand.rate_rps("b") > 0
    assert demand.rate_rps("unknown") == 0.0
    state = forget(state, "a")
    assert set(state.tracks) == {"b"}
    assert forget(state, "a") is state


def test_negative_counts_are_refused() -> None:
    with pytest.raises(ValueError, match="count"):
        record(DemandState(), "f", -1, 0.0, CFG)


def test_demand_is_a_plain_value() -> None:
    assert Demand({"f": 3.0}).rate_rps("f") == 3.0

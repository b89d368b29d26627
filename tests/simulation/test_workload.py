"""Synthetic loads: schedules, bursts, trace scaling, and seeded Poisson arrivals."""

from __future__ import annotations

import random

import pytest

from infless.sim.workload import RateSchedule, arrivals, bursty, constant, from_trace


def test_piecewise_linear_rates() -> None:
    schedule = RateSchedule(((0.0, 10.0), (10.0, 30.0)))
    assert schedule.rate_at(-1.0) == 10.0
    assert schedule.rate_at(5.0) == pytest.approx(20.0)
    assert schedule.rate_at(99.0) == 30.0
    assert schedule.peak_rps == 30.0
    assert schedule.mean_rps(10.0) == pytest.approx(20.0, rel=0.01)
    with pytest.raises(ValueError, match="time order"):
        RateSchedule(((5.0, 1.0), (1.0, 1.0)))


def test_bursts_ramp_hold_and_return() -> None:
    load = bursty(100.0, 500.0, 60.0, period_s=30.0, burst_s=8.0, ramp_s=2.0, first_burst_s=10.0)
    assert load.rate_at(5.0) == 100.0
    assert load.rate_at(11.0) == pytest.approx(300.0)
    assert load.rate_at(15.0) == 500.0
    assert load.rate_at(25.0) == 100.0
    assert load.rate_at(45.0) == 500.0


def test_trace_is_scaled_to_its_peak_and_held_per_point() -> None:
    load = from_trace([1.0, 4.0, 2.0], seconds_per_point=9.0, peak_rps=600.0)
    assert load.rate_at(4.0) == 150.0
    assert load.rate_at(13.0) == 600.0
    assert load.rate_at(20.0) == 300.0


def test_poisson_arrivals_follow_the_schedule() -> None:
    load = bursty(50.0, 250.0, 120.0, period_s=40.0)
    times = list(arrivals(load, 120.0, random.Random(7)))
    assert times == sorted(times)
    assert all(0.0 <= t < 120.0 for t in times)
    assert len(times) == pytest.approx(load.mean_rps(120.0) * 120.0, rel=0.05)
    again = list(arrivals(load, 120.0, random.Random(7)))
    assert again == times
    assert list(arrivals(constant(0.0), 10.0, random.Random(1))) == []

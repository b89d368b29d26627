"""The shared arrival generator: rate schedules with steps, seeded Poisson arrivals, and
uniform arrivals inside trace minutes."""

from __future__ import annotations

import random

import numpy as np
import pytest

from loadgen.arrivals import (
    RateSchedule,
    arrivals_in_minute,
    first_and_last_in_minutes,
    poisson_arrivals,
)


def test_piecewise_linear_rates() -> None:
    schedule = RateSchedule(((0.0, 10.0), (10.0, 30.0)))
    assert schedule.rate_at(-1.0) == 10.0
    assert schedule.rate_at(5.0) == pytest.approx(20.0)
    assert schedule.rate_at(99.0) == 30.0
    assert schedule.peak_rps == 30.0
    assert schedule.mean_rps(10.0) == pytest.approx(20.0, rel=0.01)
    with pytest.raises(ValueError, match="time order"):
        RateSchedule(((5.0, 1.0), (1.0, 1.0)))


def test_two_points_at_one_time_are_a_step() -> None:
    schedule = RateSchedule(((0.0, 0.0), (5.0, 0.0), (5.0, 40.0), (10.0, 40.0)))
    assert schedule.rate_at(5.0) == 40.0
    assert schedule.rate_before(5.0) == 0.0
    assert schedule.rate_before(2.0) == schedule.rate_at(2.0) == 0.0


def test_poisson_arrivals_are_silent_before_a_step_and_seeded() -> None:
    schedule = RateSchedule(((0.0, 0.0), (5.0, 0.0), (5.0, 40.0), (10.0, 40.0)))
    times = list(poisson_arrivals(schedule, 10.0, random.Random(11)))
    assert times == sorted(times)
    assert all(5.0 <= t < 10.0 for t in times)
    assert len(times) == pytest.approx(200, rel=0.25)
    assert times == list(poisson_arrivals(schedule, 10.0, random.Random(11)))
    assert times != list(poisson_arrivals(schedule, 10.0, random.Random(12)))


def test_a_linear_rate_is_followed() -> None:
    schedule = RateSchedule(((0.0, 0.0), (100.0, 100.0)))
    times = np.array(list(poisson_arrivals(schedule, 100.0, random.Random(2))))
    first_half, second_half = (times < 50.0).sum(), (times >= 50.0).sum()
    assert len(times) == pytest.approx(5000, rel=0.05)  # the area under the rate
    assert second_half == pytest.approx(3 * first_half, rel=0.1)  # 3750 vs 1250


def test_arrivals_in_a_minute_are_sorted_inside_it() -> None:
    times = arrivals_in_minute(np.random.default_rng(0), 50, start_s=120.0, minute_s=60.0)
    assert len(times) == 50
    assert np.all(np.diff(times) >= 0)
    assert times[0] >= 120.0
    assert times[-1] < 180.0


def test_first_and_last_bound_each_active_minute() -> None:
    counts = np.array([[0, 1, 5], [3, 0, 0]], dtype=np.int64)
    ends = first_and_last_in_minutes(counts, seed=4)
    assert ends.row.tolist() == [0, 0, 1]
    assert ends.minute.tolist() == [1, 2, 0]
    assert ends.count.tolist() == [1, 5, 3]
    assert ends.first_s[0] == ends.last_s[0]  # one arrival: first and last are the same
    assert np.all(ends.first_s <= ends.last_s)
    assert np.all(ends.first_s >= ends.minute * 60.0)
    assert np.all(ends.last_s < (ends.minute + 1) * 60.0)

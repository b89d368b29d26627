"""Schedules: trace replay (counts kept, scaling, pairing, caps) and the synthetic shapes."""

from __future__ import annotations

import itertools
import math
from collections import Counter

import pytest

from loadgen.traces import TraceRow
from loadgen.workloads import (
    ReplaySpec,
    SyntheticSpec,
    cumulative_round,
    pair_rows_with_functions,
    replay_schedule,
    scaled_window_counts,
    synthetic_schedule,
)

CAP = 1_000_000


def _row(counts: list[int], fid: str = "f") -> TraceRow:
    return TraceRow(fid, fid, fid, "", tuple(counts))


def _per_minute(at_s: list[float], minute_s: float, minutes: int) -> list[int]:
    bins = Counter(int(t // minute_s) for t in at_s)
    return [bins.get(m, 0) for m in range(minutes)]


def test_scale_one_keeps_every_minutes_count() -> None:
    counts = [0, 5, 17, 0, 3, 40, 1]
    spec = ReplaySpec(start_minute=1, minutes=5, minute_s=2.0, seed=3, scale=1.0)
    schedule = replay_schedule([(_row(counts), "fn")], spec, CAP, 1e9)
    times = [a.at_s for a in schedule.arrivals]
    assert _per_minute(times, 2.0, 5) == counts[1:6]
    assert schedule.duration_s == 10.0
    assert times == sorted(times)
    assert all(0.0 <= t < 10.0 for t in times)


def test_peak_is_scaled_to_the_target_rate() -> None:
    counts = [10, 100, 50, 0]
    spec = ReplaySpec(start_minute=0, minutes=4, minute_s=5.0, seed=0, peak_rps=4.0)
    # peak minute: 4 rps x 5 s = 20 arrivals; the others in proportion
    assert scaled_window_counts(counts, spec) == [2, 20, 10, 0]
    schedule = replay_schedule([(_row(counts), "fn")], spec, CAP, 1e9)
    assert _per_minute([a.at_s for a in schedule.arrivals], 5.0, 4) == [2, 20, 10, 0]


def test_cumulative_rounding_keeps_totals() -> None:
    values = [0.4] * 10
    rounded = cumulative_round(values)
    assert sum(rounded) == 4
    assert all(r in (0, 1) for r in rounded)
    assert cumulative_round([1.0, 2.0, 3.0]) == [1, 2, 3]


def test_window_past_the_end_is_silent() -> None:
    spec = ReplaySpec(start_minute=2, minutes=4, minute_s=1.0, seed=0, scale=1.0)
    assert scaled_window_counts([1, 2, 3, 4], spec) == [3, 4, 0, 0]


def test_replay_is_reproducible_and_seed_dependent() -> None:
    pairs = [(_row([30, 60]), "a")]
    spec = ReplaySpec(start_minute=0, minutes=2, minute_s=1.0, seed=1, scale=1.0)
    first = replay_schedule(pairs, spec, CAP, 1e9)
    assert first == replay_schedule(pairs, spec, CAP, 1e9)
    other = replay_schedule(pairs, ReplaySpec(0, 2, 1.0, seed=2, scale=1.0), CAP, 1e9)
    assert first.arrivals != other.arrivals
    assert len(first.arrivals) == len(other.arrivals) == 90


def test_pairing_rule() -> None:
    a, b, c = _row([1], "a"), _row([1], "b"), _row([1], "c")
    assert [(r.function_id, f) for r, f in pair_rows_with_functions([a], ["x", "y"])] == [
        ("a", "x"),
        ("a", "y"),
    ]
    assert [(r.function_id, f) for r, f in pair_rows_with_functions([a, b, c], ["x"])] == [
        ("a", "x"),
        ("b", "x"),
        ("c", "x"),
    ]
    with pytest.raises(ValueError, match="at least one"):
        pair_rows_with_functions([], ["x"])


def test_caps_cut_count_and_duration() -> None:
    pairs = [(_row([100, 100]), "a")]
    spec = ReplaySpec(start_minute=0, minutes=2, minute_s=1.0, seed=0, scale=1.0)
    capped = replay_schedule(pairs, spec, max_requests=50, max_duration_s=1e9)
    assert len(capped.arrivals) == 50
    assert capped.dropped_by_cap == 150
    short = replay_schedule(pairs, spec, max_requests=CAP, max_duration_s=1.0)
    assert len(short.arrivals) == 100
    assert all(a.at_s < 1.0 for a in short.arrivals)
    assert short.duration_s == 1.0


def test_replay_spec_validates() -> None:
    with pytest.raises(ValueError, match="minute_s"):
        ReplaySpec(start_minute=0, minutes=1, minute_s=0.0, seed=0)
    with pytest.raises(ValueError, match="minutes"):
        ReplaySpec(start_minute=0, minutes=0, minute_s=1.0, seed=0)


def test_constant_is_evenly_spaced_and_interleaved() -> None:
    spec = SyntheticSpec("constant", rate_rps=10.0, duration_s=2.0, seed=0)
    schedule = synthetic_schedule(spec, ["a", "b"], CAP, 1e9)
    a_times = [x.at_s for x in schedule.arrivals if x.function == "a"]
    b_times = [x.at_s for x in schedule.arrivals if x.function == "b"]
    assert len(a_times) == len(b_times) == 20
    assert all(math.isclose(t2 - t1, 0.1) for t1, t2 in itertools.pairwise(a_times))
    assert math.isclose(b_times[0], 0.05)


def test_poisson_count_is_plausible_and_seeded() -> None:
    spec = SyntheticSpec("poisson", rate_rps=100.0, duration_s=10.0, seed=4)
    first = synthetic_schedule(spec, ["a"], CAP, 1e9)
    assert first == synthetic_schedule(spec, ["a"], CAP, 1e9)
    assert 800 < len(first.arrivals) < 1200  # mean 1000, sd ~32


def test_step_levels() -> None:
    spec = SyntheticSpec(
        "step", rate_rps=0.0, duration_s=100.0, seed=0, rates_rps=(0.0, 50.0), step_s=10.0
    )
    schedule = synthetic_schedule(spec, ["a"], CAP, 1e9)
    assert schedule.duration_s == 20.0
    assert all(10.0 <= a.at_s < 20.0 for a in schedule.arrivals)
    assert 350 < len(schedule.arrivals) < 650


def test_ramp_rises() -> None:
    spec = SyntheticSpec("ramp", rate_rps=0.0, ramp_to_rps=200.0, duration_s=10.0, seed=0)
    times = [a.at_s for a in synthetic_schedule(spec, ["a"], CAP, 1e9).arrivals]
    first_half = sum(1 for t in times if t < 5.0)
    assert first_half < len(times) - first_half
    assert 800 < len(times) < 1200  # mean 1000


def test_burst_is_silent_when_off() -> None:
    spec = SyntheticSpec("burst", rate_rps=100.0, duration_s=8.0, seed=0, on_s=1.0, off_s=3.0)
    times = [a.at_s for a in synthetic_schedule(spec, ["a"], CAP, 1e9).arrivals]
    assert times
    assert all(t % 4.0 < 1.0 for t in times)


def test_synthetic_spec_validates() -> None:
    with pytest.raises(ValueError, match="shape"):
        SyntheticSpec("zigzag", rate_rps=1.0, duration_s=1.0, seed=0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="rate"):
        SyntheticSpec("poisson", rate_rps=-1.0, duration_s=1.0, seed=0)

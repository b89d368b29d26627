"""The soak's pure parts: the schedule of kills and churn steps, growth of a series against
its own start, and requests counted per window by outcome."""

from __future__ import annotations

import pytest

from bench.soak_measure import growth, window_counts
from bench.soak_schedule import schedule


def test_kills_take_the_loaded_functions_in_turn_and_stop_before_the_end() -> None:
    events = schedule(300.0, 60.0, 0.0, ["a", "b"], "churn")
    assert [(e.at_s, e.kind, e.function) for e in events] == [
        (60.0, "kill", "a"),
        (120.0, "kill", "b"),
        (180.0, "kill", "a"),
        (240.0, "kill", "b"),
    ]


def test_the_churn_cycles_and_never_leaves_its_function_deployed() -> None:
    events = schedule(200.0, 0.0, 30.0, ["a"], "churn")
    kinds = [e.kind for e in events]
    assert kinds == ["deploy", "scale-up", "scale-down", "remove", "deploy", "remove"]
    assert all(e.function == "churn" for e in events)
    assert events[-1].at_s < 200.0
    assert [e.at_s for e in events] == sorted(e.at_s for e in events)


def test_a_flat_series_does_not_grow_and_a_leak_does() -> None:
    flat = [(float(t), 100.0 + (t % 3)) for t in range(0, 600, 5)]
    still = growth(flat)
    assert abs(still.change_pct) < 2.0
    assert abs(still.slope_per_h) < 20.0
    leak = [(float(t), 100.0 + t / 10.0) for t in range(0, 600, 5)]  # 6 MiB a minute
    grew = growth(leak)
    assert grew.change_pct > 20.0
    assert grew.slope_per_h == pytest.approx(360.0)
    # the warm-up (instances starting) is not held against the run
    warming = [(float(t), 10.0 if t < 60 else 100.0) for t in range(0, 600, 5)]
    assert growth(warming).change_pct == 0.0


def test_requests_are_counted_per_window_by_outcome() -> None:
    outcomes = [(0.5, 200), (1.0, 429), (9.9, 0), (10.0, 200), (25.0, 503)]
    assert window_counts(outcomes, 10.0) == [
        (0.0, {"ok": 1, "rejected": 1, "error": 1}),
        (10.0, {"ok": 1, "rejected": 0, "error": 0}),
        (20.0, {"ok": 0, "rejected": 0, "error": 1}),
    ]

"""The live board's series: rates from counters between points, quantiles of the recent
answers, a restarted counter, a bounded history and functions that are gone."""

from __future__ import annotations

import pytest

from infless.gateway.board.series import FIELDS, Reading, Series, point

ZERO = Reading(offered=0, served=0, refused=0, failed=0, cold_starts=0, queue=0, instances=1)


def _reading(
    offered: int,
    served: int,
    refused: int = 0,
    *,
    failed: int = 0,
    cold_starts: int = 0,
    queue: int = 0,
    instances: int = 1,
    latencies_ms: tuple[float, ...] = (),
) -> Reading:
    return Reading(
        offered, served, refused, failed, cold_starts, queue, instances, latencies_ms
    )  # fmt: skip


def _field(p: tuple[object, ...], name: str) -> object:
    return p[FIELDS.index(name)]


def test_a_first_point_has_no_rates_and_later_ones_count_per_second() -> None:
    first = point(1_700_000_000.0, _reading(10, 8), None, 100.0)
    assert _field(first, "offeredRps") is None
    assert _field(first, "coldStarts") is None
    assert _field(first, "instances") == 1
    later = point(
        1_700_000_002.0,
        _reading(30, 26, refused=2, failed=1, cold_starts=1, queue=4, instances=2),
        (100.0, _reading(10, 8)),
        102.0,
    )
    assert _field(later, "offeredRps") == 10.0  # 20 calls over 2 s
    assert _field(later, "servedRps") == 9.0
    assert _field(later, "refusedRps") == 1.0
    assert _field(later, "failedRps") == 0.5
    assert _field(later, "coldStarts") == 1
    assert (_field(later, "queue"), _field(later, "instances")) == (4, 2)


def test_quantiles_come_from_the_recent_answers() -> None:
    latencies = tuple(float(ms) for ms in range(1, 101))  # 1..100 ms
    p = point(0.0, _reading(0, 0, latencies_ms=latencies), None, 1.0)
    assert _field(p, "p50Ms") == 50.0
    assert _field(p, "p99Ms") == 99.0
    quiet = point(0.0, _reading(0, 0), None, 1.0)
    assert _field(quiet, "p50Ms") is None
    assert _field(quiet, "p99Ms") is None


def test_a_counter_that_went_down_counts_from_zero() -> None:
    """A function removed and deployed again under its name: its counters restart."""
    p = point(0.0, _reading(3, 3, cold_starts=1), (10.0, _reading(500, 490, cold_starts=7)), 11.0)
    assert _field(p, "offeredRps") == 3.0
    assert _field(p, "servedRps") == 3.0
    assert _field(p, "coldStarts") == 1


def test_the_history_is_bounded_per_function_and_forgets_removed_ones() -> None:
    series = Series(points=3)
    for second in range(5):
        latest = series.sample(
            float(second), 1000.0 + second, {"a": _reading(second * 2, second), "b": ZERO}
        )
        assert set(latest) == {"a", "b"}
    history = series.history()
    assert history["a"]["t"] == [1002.0, 1003.0, 1004.0]
    assert history["a"]["offeredRps"] == [2.0, 2.0, 2.0]
    assert set(history["a"]) == set(FIELDS)
    series.sample(5.0, 1005.0, {"a": _reading(10, 5)})
    assert set(series.history()) == {"a"}
    series.sample(6.0, 1006.0, {"a": _reading(12, 6), "b": ZERO})  # b is back: a new series
    assert series.history()["b"]["offeredRps"] == [None]


def test_a_series_keeps_at_least_one_point() -> None:
    with pytest.raises(ValueError, match="at least one point"):
        Series(points=0)

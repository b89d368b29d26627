"""Per function, the live board's time series: offered, served, refused and failed rates,
cold starts, p50/p99, queue and ready instances, one point per interval over the last
minutes.

A point's rates are the counters' change since the previous point over the time between
them (a function's first point has none: nothing to compare with); its quantiles are those
of the latencies answered recently. Counters that went down (a function removed and
deployed again under its name) count from zero. Pure bookkeeping: no I/O, no clock (times
are arguments).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from infless.dataplane.latency import quantile

# A point's fields, in the order `Series` stores them and the page reads them.
FIELDS = (
    "t",  # Unix seconds
    "offeredRps",  # calls arriving (refused ones included)
    "servedRps",  # answered with a 2xx
    "refusedRps",  # answered 429
    "failedRps",  # any other error
    "coldStarts",  # cold starts in the interval
    "p50Ms",
    "p99Ms",
    "queue",  # requests waiting (instance queues and the waiting room)
    "instances",  # ready instances
)
Point = tuple[float | int | None, ...]


@dataclass(frozen=True, slots=True)
class Reading:
    """One function's counters (since the gateway started) and gauges, at one instant."""

    offered: int
    served: int
    refused: int
    failed: int
    cold_starts: int
    queue: int
    instances: int
    latencies_ms: Sequence[float] = ()  # the answers of the last second or two


def _rate(now: int, before: int, span_s: float) -> float:
    grown = now - before if now >= before else now  # a counter that restarted
    return round(grown / span_s, 3)


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def point(
    wall_s: float, reading: Reading, previous: tuple[float, Reading] | None, now_s: float
) -> Point:
    """One point of a function's series: its rates against `previous` (monotonic time and
    reading), None without one or when no time passed."""
    latencies = list(reading.latencies_ms)
    p50 = quantile(latencies, 0.5) if latencies else None
    p99 = quantile(latencies, 0.99) if latencies else None
    rates: tuple[float | int | None, ...] = (None, None, None, None, None)
    if previous is not None and now_s > previous[0]:
        span_s, before = now_s - previous[0], previous[1]
        cold = reading.cold_starts - before.cold_starts
        rates = (
            _rate(reading.offered, before.offered, span_s),
            _rate(reading.served, before.served, span_s),
            _rate(reading.refused, before.refused, span_s),
            _rate(reading.failed, before.failed, span_s),
            cold if cold >= 0 else reading.cold_starts,
        )
    return (round(wall_s, 3), *rates, _ms(p50), _ms(p99), reading.queue, reading.instances)


class Series:
    """The last `points` points of every function; a function that is gone is forgotten."""

    def __init__(self, points: int) -> None:
        if points < 1:
            raise ValueError(f"a series keeps at least one point, got {points}")
        self._points = points
        self._series: dict[str, deque[Point]] = {}
        self._last: dict[str, tuple[float, Reading]] = {}

    def sample(
        self, now_s: float, wall_s: float, readings: Mapping[str, Reading]
    ) -> dict[str, Point]:
        """Append one point per function read; returns those points."""
        latest: dict[str, Point] = {}
        for name, reading in readings.items():
            latest[name] = point(wall_s, reading, self._last.get(name), now_s)
            self._last[name] = (now_s, reading)
            series = self._series.get(name)
            if series is None:
                series = self._series[name] = deque(maxlen=self._points)
            series.append(latest[name])
        for gone in set(self._series) - set(readings):
            del self._series[gone]
            del self._last[gone]
        return latest

    def history(self) -> dict[str, dict[str, list[float | int | None]]]:
        """Every function's points, by field (columns: the page plots them as they are)."""
        return {
            name: {field: [p[i] for p in points] for i, field in enumerate(FIELDS)}
            for name, points in self._series.items()
        }

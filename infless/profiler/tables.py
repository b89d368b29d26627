"""Operator profile tables: an operator's time over the batch at each profiled thread count.

Linear interpolation between profiled batch sizes (beyond the largest: the last slope, never
negative); over threads, the best of the counts profiled up to the one asked. Pure: no I/O,
no clock, no torch.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from infless.profiler.database import ProfileRow


def unscaled(_cpus: int) -> float:
    """The scale of a curve taken as profiled, whatever its thread count."""
    return 1.0


@dataclass(frozen=True, slots=True)
class BatchCurve:
    """Time over batch size at one thread count, as profiled (not necessarily monotone)."""

    batches: tuple[int, ...]
    times_ms: tuple[float, ...]

    @staticmethod
    def of(points: Iterable[tuple[int, float]]) -> BatchCurve:
        ordered = sorted(dict(points).items())
        if not ordered:
            raise ValueError("a batch curve needs at least one point")
        return BatchCurve(tuple(b for b, _ in ordered), tuple(t for _, t in ordered))

    def at(self, batch_size: int) -> float:
        b, t = self.batches, self.times_ms
        if batch_size <= b[0]:
            return t[0]
        if batch_size >= b[-1]:
            if len(b) == 1:
                return t[0] * batch_size / b[0]
            slope = max(0.0, (t[-1] - t[-2]) / (b[-1] - b[-2]))
            return t[-1] + slope * (batch_size - b[-1])
        i = bisect.bisect_right(b, batch_size)
        frac = (batch_size - b[i - 1]) / (b[i] - b[i - 1])
        return t[i - 1] + frac * (t[i] - t[i - 1])


@dataclass(frozen=True, slots=True)
class OpTable:
    """One operator's profiles at one GPU share: a batch curve per profiled thread count.

    At `cpus` threads the operator takes, at each profiled batch size, the best of the
    curves profiled at up to `cpus` threads. It interpolates linearly between those points,
    so its time stays piecewise linear with kinks at profiled batch sizes only: the model's
    running maximum relies on that. Beyond the largest, it takes the best of the curves'
    extrapolations, which never decrease.
    """

    curves: tuple[tuple[int, BatchCurve], ...]  # (cpus, curve), cpus ascending
    grid: tuple[int, ...] = ()  # every profiled batch size of any curve, ascending

    @staticmethod
    def of(rows: Iterable[ProfileRow]) -> OpTable:
        by_cpus: dict[int, list[tuple[int, float]]] = {}
        for row in rows:
            by_cpus.setdefault(row.cpus, []).append((row.batch, row.time_ms))
        if not by_cpus:
            raise ValueError("an operator table needs at least one profile row")
        curves = tuple((c, BatchCurve.of(p)) for c, p in sorted(by_cpus.items()))
        return OpTable(curves, tuple(sorted({b for _, c in curves for b in c.batches})))

    def at(self, batch_size: int, cpus: int, factor: Callable[[int], float] = unscaled) -> float:
        """The time at <batch_size, cpus>; `factor(c)` scales the curve profiled at c threads."""
        # more threads never slower: the best of every profiled count up to `cpus`
        usable = [(c, curve) for c, curve in self.curves if c <= cpus] or [self.curves[0]]
        if len(usable) == 1:
            c, curve = usable[0]
            return curve.at(batch_size) * factor(c)

        def best(batch: int) -> float:
            return min(curve.at(batch) * factor(c) for c, curve in usable)

        grid = self.grid
        if batch_size <= grid[0]:
            return best(grid[0])
        if batch_size >= grid[-1]:  # each curve extrapolates non-decreasing: so does the best
            return best(batch_size)
        i = bisect.bisect_right(grid, batch_size)
        low, high = best(grid[i - 1]), best(grid[i])
        return low + (batch_size - grid[i - 1]) / (grid[i] - grid[i - 1]) * (high - low)

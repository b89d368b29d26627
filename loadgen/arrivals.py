"""Arrival times: the one arrival generator, shared by the load generator, the simulator and
the cold-start evaluation.

It makes arrivals in two ways. Both are seeded and pure: no I/O, no clock.

* From a rate. A `RateSchedule` is a piecewise-linear rate over time: points `(t_s,
  rate_rps)`, constant before the first point and after the last. Two points at the same
  time make a step. `poisson_arrivals` draws a non-homogeneous Poisson process from it by
  thinning, segment by segment, each segment at its own peak rate. Synthetic loads (loadgen)
  and the simulator's loads use it.
* From counts per minute, as a trace gives them. A minute that holds k arrivals gets k
  uniform times inside it: a Poisson process conditioned on its count.
  `arrivals_in_minute` draws all k (trace replay in loadgen). `first_and_last_in_minutes`
  draws only each minute's first and last arrival, as order statistics of the k uniforms:
  exact, vectorised, and O(active minutes) (the cold-start evaluation, where only these
  two matter).

It lives in loadgen because the load generator may import nothing of infless, while infless
may import loadgen. numpy and the standard library only.
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class RateSchedule:
    """A piecewise-linear rate over time; two points at one time are a step."""

    points: tuple[tuple[float, float], ...]

    def __post_init__(self) -> None:
        if not self.points:
            raise ValueError("a rate schedule needs at least one (t_s, rate_rps) point")
        times = [t for t, _ in self.points]
        if times != sorted(times) or any(r < 0 for _, r in self.points):
            raise ValueError("schedule points must be in time order with rates >= 0")

    def rate_at(self, t_s: float) -> float:
        """The rate at `t_s`; at a step, the rate after it."""
        times = [t for t, _ in self.points]
        return self._rate(t_s, bisect.bisect_right(times, t_s))

    def rate_before(self, t_s: float) -> float:
        """The rate just before `t_s`; at a step, the rate before it."""
        times = [t for t, _ in self.points]
        return self._rate(t_s, bisect.bisect_left(times, t_s))

    def _rate(self, t_s: float, i: int) -> float:
        if i == 0:
            return self.points[0][1]
        if i == len(self.points):
            return self.points[-1][1]
        (t0, r0), (t1, r1) = self.points[i - 1], self.points[i]
        return r0 if t1 == t0 else r0 + (r1 - r0) * (t_s - t0) / (t1 - t0)

    @property
    def peak_rps(self) -> float:
        return max(r for _, r in self.points)

    def mean_rps(self, duration_s: float) -> float:
        """The average rate over [0, duration_s] (trapezoids on a 0.1 s grid)."""
        steps = max(1, int(duration_s / 0.1))
        dt = duration_s / steps
        total = sum(
            (self.rate_at(k * dt) + self.rate_at((k + 1) * dt)) / 2 * dt for k in range(steps)
        )
        return total / duration_s


def poisson_arrivals(
    schedule: RateSchedule, duration_s: float, rng: random.Random, start_s: float = 0.0
) -> Iterator[float]:
    """Arrival times in [start_s, duration_s) of a Poisson process with the schedule's rate.

    Each segment between two of the schedule's times is linear: candidates come at the
    segment's peak rate, and each is kept with probability rate(t) / peak.
    """
    bounds = sorted(
        {start_s, duration_s, *(t for t, _ in schedule.points if start_s < t < duration_s)}
    )
    for seg_start, seg_end in itertools.pairwise(bounds):
        r0, r1 = schedule.rate_at(seg_start), schedule.rate_before(seg_end)
        peak = max(r0, r1)
        if peak <= 0:
            continue
        slope = (r1 - r0) / (seg_end - seg_start)  # the rate is linear inside a segment
        t = seg_start
        while True:
            t += -math.log(1.0 - rng.random()) / peak
            if t >= seg_end:
                break
            if r0 == r1 or rng.random() * peak <= r0 + slope * (t - seg_start):
                yield t


def arrivals_in_minute(
    rng: np.random.Generator, count: int, start_s: float, minute_s: float
) -> FloatArray:
    """`count` sorted uniform arrival times in [start_s, start_s + minute_s)."""
    return start_s + np.sort(rng.uniform(0.0, minute_s, size=count))


@dataclass(frozen=True, slots=True)
class MinuteEnds:
    """The first and last arrival of every active (row, minute) of a count matrix, row-major."""

    row: IntArray
    minute: IntArray
    count: IntArray
    first_s: FloatArray
    last_s: FloatArray


def first_and_last_in_minutes(
    counts: NDArray[np.int64], seed: int, minute_s: float = 60.0
) -> MinuteEnds:
    """Each active minute's first and last arrival, as if its k arrivals were uniform in it.

    The maximum of k uniforms on [0, 1) is U^(1/k); given it, the other k - 1 are uniform
    below it, so their minimum is drawn the same way under the maximum.
    """
    row, minute = np.nonzero(counts)
    k = counts[row, minute].astype(np.int64)
    rng = np.random.default_rng(seed)
    u_last, u_first = rng.random((2, k.shape[0]))
    start_s = minute * minute_s
    last_frac = u_last ** (1.0 / k)
    others = np.maximum(k - 1, 1)
    first_frac = np.where(k > 1, last_frac * (1.0 - u_first ** (1.0 / others)), last_frac)
    return MinuteEnds(
        row=row.astype(np.int64),
        minute=minute.astype(np.int64),
        count=k,
        first_s=start_s + minute_s * first_frac,
        last_s=start_s + minute_s * last_frac,
    )

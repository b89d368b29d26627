"""Synthetic and trace-shaped loads for the simulator: rate schedules and Poisson arrivals.

A `RateSchedule` is a piecewise-linear rate over time (points `(t_s, rate_rps)`; constant
before the first and after the last point). `arrivals` draws a non-homogeneous Poisson
process from it by thinning, segment by segment (each segment's own peak), with a seeded
`random.Random`, so a run is reproducible. Pure: no I/O, no clock.
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RateSchedule:
    points: tuple[tuple[float, float], ...]

    def __post_init__(self) -> None:
        if not self.points:
            raise ValueError("a rate schedule needs at least one (t_s, rate_rps) point")
        times = [t for t, _ in self.points]
        if times != sorted(times) or any(r < 0 for _, r in self.points):
            raise ValueError("schedule points must be in time order with rates >= 0")

    def rate_at(self, t_s: float) -> float:
        times = [t for t, _ in self.points]
        i = bisect.bisect_right(times, t_s)
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


def constant(rate_rps: float) -> RateSchedule:
    return RateSchedule(((0.0, rate_rps),))


def bursty(
    base_rps: float,
    peak_rps: float,
    duration_s: float,
    period_s: float = 30.0,
    burst_s: float = 8.0,
    ramp_s: float = 3.0,
    first_burst_s: float = 10.0,
) -> RateSchedule:
    """`base_rps` with a burst to `peak_rps` every `period_s`: ramp up, hold, ramp down."""
    if period_s < burst_s + 2 * ramp_s:
        raise ValueError(
            f"period_s = {period_s}: must be >= burst_s + 2·ramp_s = {burst_s + 2 * ramp_s}"
        )
    points: list[tuple[float, float]] = [(0.0, base_rps)]
    start = first_burst_s
    while start < duration_s:
        points += [
            (start, base_rps),
            (start + ramp_s, peak_rps),
            (start + ramp_s + burst_s, peak_rps),
            (start + 2 * ramp_s + burst_s, base_rps),
        ]
        start += period_s
    return RateSchedule(tuple(points))


def periodic(
    base_rps: float,
    peak_rps: float,
    duration_s: float,
    period_s: float = 20.0,
    phase_s: float = 0.0,
) -> RateSchedule:
    """A triangle wave between `base_rps` (at t = −phase_s) and `peak_rps` half a period
    later (INFless Figure 10's periodic)."""
    half_s = period_s / 2.0
    points: list[tuple[float, float]] = []
    k = 0
    while not points or points[-1][0] <= duration_s:
        points.append((k * half_s - phase_s % period_s, peak_rps if k % 2 else base_rps))
        k += 1
    return RateSchedule(tuple(points))


def sporadic(
    rate_rps: float, duration_s: float, on_s: float = 3.0, off_s: float = 12.0, start_s: float = 0.0
) -> RateSchedule:
    """Short spells at `rate_rps` with silence between (INFless Figure 10's sporadic)."""
    points: list[tuple[float, float]] = [(0.0, 0.0)]
    t = start_s
    while t < duration_s:
        points += [(t, 0.0), (t + 0.001, rate_rps), (t + on_s, rate_rps), (t + on_s + 0.001, 0.0)]
        t += on_s + off_s
    return RateSchedule(tuple(points))


def from_trace(values: Sequence[float], seconds_per_point: float, peak_rps: float) -> RateSchedule:
    """INFless's replay: each trace value scaled so the maximum is `peak_rps`, held per point."""
    top = max(values, default=0.0)
    scale = 0.0 if top <= 0 else peak_rps / top
    points: list[tuple[float, float]] = []
    for k, value in enumerate(values):
        points += [
            (k * seconds_per_point, value * scale),
            ((k + 1) * seconds_per_point, value * scale),
        ]
    return RateSchedule(tuple(points) or ((0.0, 0.0),))


def arrivals(
    schedule: RateSchedule, duration_s: float, rng: random.Random, start_s: float = 0.0
) -> Iterator[float]:
    """Arrival times in [start_s, duration_s) of a Poisson process with the schedule's rate."""
    bounds = sorted(
        {start_s, duration_s, *(t for t, _ in schedule.points if start_s < t < duration_s)}
    )
    for seg_start, seg_end in itertools.pairwise(bounds):
        r0, r1 = schedule.rate_at(seg_start), schedule.rate_at(seg_end)
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

"""The simulator's load shapes: constant, bursty, periodic, sporadic and trace-shaped rates.

Each shape is a `RateSchedule`. Arrivals are drawn from it by the shared arrival generator,
`loadgen.arrivals.poisson_arrivals` (a seeded non-homogeneous Poisson process), the same one
that draws the load generator's synthetic loads. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Sequence

from loadgen.arrivals import RateSchedule

__all__ = ["RateSchedule", "bursty", "constant", "from_trace", "periodic", "sporadic"]


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

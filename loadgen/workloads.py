"""Workloads: when each request is sent, as a pure, seeded schedule of arrivals.

Pure: no I/O, no clock, no network. The same arguments and seed give the same schedule.

* Trace replay: each trace row is paired with a function; the row's counts in the window
  [start_minute, start_minute + minutes) are scaled (to a peak rate or by a factor), rounded
  by cumulative rounding (totals kept, each minute within 1 of its scaled value; factor 1 keeps
  every minute's count exactly), and a trace minute lasts `minute_s` seconds of the run.
  Within a minute, n arrivals are n sorted uniform times: a Poisson process conditioned on
  its count.
* Synthetic: `constant` (evenly spaced), `poisson` (homogeneous), `step` (Poisson at each
  level for `step_s`), `ramp` (Poisson, rate linear from `rate_rps` to `ramp_to_rps`),
  `burst` (Poisson at `rate_rps` for `on_s`, then at `off_rate_rps` for `off_s`, repeated).
  The arrival times come from the shared arrival generator, `loadgen.arrivals`.
* Closed loop: no schedule but a plan: `concurrency` clients per function, each sending its
  next request as soon as its previous answer arrives, while the run is younger than its
  duration and fewer than `max_requests` were sent in all.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from loadgen.arrivals import RateSchedule, arrivals_in_minute, poisson_arrivals
from loadgen.traces import TraceRow

SyntheticShape = Literal["constant", "poisson", "step", "ramp", "burst"]
SYNTHETIC_SHAPES: tuple[SyntheticShape, ...] = ("constant", "poisson", "step", "ramp", "burst")


@dataclass(frozen=True, slots=True)
class Arrival:
    at_s: float  # seconds after the run starts
    function: str


@dataclass(frozen=True, slots=True)
class Schedule:
    arrivals: tuple[Arrival, ...]  # sorted by at_s
    duration_s: float
    description: str
    dropped_by_cap: int = 0  # arrivals cut by the request-count or duration cap

    @property
    def functions(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(a.function for a in self.arrivals))


@dataclass(frozen=True, slots=True)
class ReplaySpec:
    start_minute: int  # 0-based index into the row's minutes
    minutes: int
    minute_s: float  # run seconds per trace minute (time compression)
    seed: int
    peak_rps: float | None = None  # scale each row so its window peak minute runs at this rate
    scale: float = 1.0  # used when peak_rps is None; 1.0 keeps the trace's counts per minute

    def __post_init__(self) -> None:
        if self.start_minute < 0:
            raise ValueError(f"start_minute={self.start_minute}: must be >= 0")
        if self.minutes < 1:
            raise ValueError(f"minutes={self.minutes}: replay at least 1 trace minute")
        if not self.minute_s > 0:
            raise ValueError(f"minute_s={self.minute_s}: must be > 0 seconds")
        if self.peak_rps is not None and not self.peak_rps > 0:
            raise ValueError(f"peak_rps={self.peak_rps}: must be > 0")
        if not self.scale >= 0:
            raise ValueError(f"scale={self.scale}: must be >= 0")


@dataclass(frozen=True, slots=True)
class SyntheticSpec:
    shape: SyntheticShape
    rate_rps: float  # per function; the start rate of a ramp, the on-rate of a burst
    duration_s: float
    seed: int
    rates_rps: tuple[float, ...] = ()  # step levels (default: rate_rps only)
    step_s: float = 10.0
    ramp_to_rps: float = 0.0
    on_s: float = 5.0
    off_s: float = 5.0
    off_rate_rps: float = 0.0

    def __post_init__(self) -> None:
        if self.shape not in SYNTHETIC_SHAPES:
            raise ValueError(f"shape={self.shape!r}: choose one of {', '.join(SYNTHETIC_SHAPES)}")
        if not self.duration_s > 0:
            raise ValueError(f"duration_s={self.duration_s}: must be > 0")
        rates = (self.rate_rps, self.ramp_to_rps, self.off_rate_rps, *self.rates_rps)
        if any(not r >= 0 for r in rates):
            raise ValueError(f"rates {rates}: every rate must be >= 0 requests/s")
        if self.shape == "step" and not self.step_s > 0:
            raise ValueError(f"step_s={self.step_s}: must be > 0")
        if self.shape == "burst" and not (self.on_s > 0 and self.off_s >= 0):
            raise ValueError(f"on_s={self.on_s}, off_s={self.off_s}: need on_s > 0, off_s >= 0")


def pair_rows_with_functions(
    rows: Sequence[TraceRow], functions: Sequence[str]
) -> list[tuple[TraceRow, str]]:
    """max(R, F) pairs (rows[k % R], functions[k % F]): one row drives every function, several
    rows drive one function as their sum, equal numbers pair up in order."""
    if not rows or not functions:
        raise ValueError("need at least one trace row and one function to pair")
    return [
        (rows[k % len(rows)], functions[k % len(functions)])
        for k in range(max(len(rows), len(functions)))
    ]


def cumulative_round(values: Sequence[float]) -> list[int]:
    """Integers whose running sums are the rounded running sums of `values`."""
    result: list[int] = []
    running = 0.0
    emitted = 0
    for value in values:
        running += value
        target = math.floor(running + 0.5)
        result.append(target - emitted)
        emitted = target
    return result


def scaled_window_counts(counts: Sequence[int], spec: ReplaySpec) -> list[int]:
    """The row's counts in the window, scaled as the spec says (see the module docstring)."""
    window = list(counts[spec.start_minute : spec.start_minute + spec.minutes])
    window += [0] * (spec.minutes - len(window))  # past the end of the day: silence
    if spec.peak_rps is not None:
        peak = max(window)
        factor = spec.peak_rps * spec.minute_s / peak if peak > 0 else 0.0
    else:
        factor = spec.scale
    return cumulative_round([c * factor for c in window])


def replay_schedule(
    pairs: Sequence[tuple[TraceRow, str]],
    spec: ReplaySpec,
    max_requests: int,
    max_duration_s: float,
) -> Schedule:
    times: list[np.ndarray] = []
    names: list[str] = []
    for index, (row, function) in enumerate(pairs):
        rng = np.random.default_rng([spec.seed, index])
        for minute, count in enumerate(scaled_window_counts(row.counts_per_minute, spec)):
            if count <= 0:
                continue
            times.append(arrivals_in_minute(rng, count, minute * spec.minute_s, spec.minute_s))
            names.extend([function] * count)
    scaling = f"peak {spec.peak_rps} rps per row" if spec.peak_rps else f"scale x{spec.scale}"
    ids = ", ".join(f"{row.function_id[:12]}->{fn}" for row, fn in pairs)
    rows = len({row.function_id for row, _ in pairs})
    description = (
        f"trace replay of {rows} row(s) as {len(pairs)} stream(s) [{ids}], "
        f"minutes {spec.start_minute}.."
        f"{spec.start_minute + spec.minutes - 1}, {spec.minute_s:g} s per minute, {scaling}, "
        f"seed {spec.seed}"
    )
    return _finish(
        times, names, spec.minutes * spec.minute_s, description, max_requests, max_duration_s
    )


def synthetic_rate(spec: SyntheticSpec) -> RateSchedule:
    """The rate over time of a Poisson shape (`poisson`, `step`, `ramp` or `burst`)."""
    if spec.shape == "ramp":
        return RateSchedule(((0.0, spec.rate_rps), (spec.duration_s, spec.ramp_to_rps)))
    if spec.shape == "step":
        levels = spec.rates_rps or (spec.rate_rps,)
        points: list[tuple[float, float]] = []
        for level, rate_rps in enumerate(levels):
            t0_s = level * spec.step_s
            points += [(t0_s, rate_rps), (t0_s + spec.step_s, rate_rps)]
        return RateSchedule((*points, (len(levels) * spec.step_s, 0.0)))  # silent afterwards
    if spec.shape == "burst" and spec.off_s > 0:
        points = []
        t0_s = 0.0
        while t0_s < spec.duration_s:
            on_end_s = t0_s + spec.on_s
            off_end_s = on_end_s + spec.off_s
            points += [(t0_s, spec.rate_rps), (on_end_s, spec.rate_rps)]
            points += [(on_end_s, spec.off_rate_rps), (off_end_s, spec.off_rate_rps)]
            t0_s = off_end_s
        return RateSchedule(tuple(points))
    return RateSchedule(((0.0, spec.rate_rps),))  # poisson, and a burst that is never off


def synthetic_times(spec: SyntheticSpec, stream_index: int, streams: int) -> np.ndarray:
    """Arrival times (s) of one function's stream; streams are independent (seeded apart).

    `constant` is evenly spaced, its streams interleaved. Every other shape is a Poisson
    process drawn by the shared generator, `loadgen.arrivals.poisson_arrivals`.
    """
    if spec.shape == "constant":
        if spec.rate_rps <= 0:
            return np.empty(0)
        gap_s = 1.0 / spec.rate_rps
        phase_s = gap_s * stream_index / max(streams, 1)  # interleave functions
        return np.arange(phase_s, spec.duration_s, gap_s)
    rng = random.Random(f"{spec.seed}:{stream_index}")
    times = poisson_arrivals(synthetic_rate(spec), spec.duration_s, rng)
    return np.fromiter(times, dtype=np.float64)


def synthetic_duration_s(spec: SyntheticSpec) -> float:
    if spec.shape == "step" and spec.rates_rps:
        return min(spec.duration_s, spec.step_s * len(spec.rates_rps))
    return spec.duration_s


def synthetic_schedule(
    spec: SyntheticSpec, functions: Sequence[str], max_requests: int, max_duration_s: float
) -> Schedule:
    if not functions:
        raise ValueError("a synthetic load needs at least one function")
    times: list[np.ndarray] = []
    names: list[str] = []
    for index, function in enumerate(functions):
        stream = synthetic_times(spec, index, len(functions))
        times.append(stream)
        names.extend([function] * len(stream))
    description = (
        f"synthetic {spec.shape} at {spec.rate_rps:g} rps per function for {spec.duration_s:g} s "
        f"on {', '.join(functions)}, seed {spec.seed}"
    )
    return _finish(
        times, names, synthetic_duration_s(spec), description, max_requests, max_duration_s
    )


def _finish(
    times: list[np.ndarray],
    names: list[str],
    duration_s: float,
    description: str,
    max_requests: int,
    max_duration_s: float,
) -> Schedule:
    """Merge streams in time order (stable: ties keep stream order) and apply the hard caps."""
    if max_requests < 0 or not max_duration_s > 0:
        raise ValueError(f"caps max_requests={max_requests}, max_duration_s={max_duration_s}")
    all_times = np.concatenate(times) if times else np.empty(0)
    order = np.argsort(all_times, kind="stable")
    arrivals = [Arrival(float(all_times[i]), names[i]) for i in order]
    total = len(arrivals)
    arrivals = [a for a in arrivals if a.at_s < max_duration_s][:max_requests]
    return Schedule(
        arrivals=tuple(arrivals),
        duration_s=min(duration_s, max_duration_s),
        description=description,
        dropped_by_cap=total - len(arrivals),
    )


@dataclass(frozen=True, slots=True)
class ClosedLoopSpec:
    concurrency: int  # clients per function
    duration_s: float

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError(f"--concurrency {self.concurrency}: need at least 1 client")
        if not self.duration_s > 0:
            raise ValueError(f"--duration-s {self.duration_s}: must be > 0")


@dataclass(frozen=True, slots=True)
class ClosedLoopPlan:
    clients: tuple[str, ...]  # the function each client drives
    duration_s: float  # no request is sent later than this after the start
    max_requests: int  # no more requests than this in all
    description: str

    @property
    def functions(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.clients))

    def may_send(self, elapsed_s: float, sent: int) -> bool:
        """Whether a client whose answer just arrived sends again."""
        return sent < self.max_requests and elapsed_s < self.duration_s


def closed_loop_plan(
    spec: ClosedLoopSpec, functions: Sequence[str], max_requests: int, max_duration_s: float
) -> ClosedLoopPlan:
    """`concurrency` clients per function, interleaved (client k drives function k % F), so a
    small `max_requests` still reaches every function."""
    if not functions:
        raise ValueError("a closed-loop load needs at least one function")
    if max_requests < 0 or not max_duration_s > 0:
        raise ValueError(f"caps max_requests={max_requests}, max_duration_s={max_duration_s}")
    clients = tuple(functions[k % len(functions)] for k in range(spec.concurrency * len(functions)))
    description = (
        f"synthetic closed loop: {spec.concurrency} client(s) per function, each sending when "
        f"its previous answer arrives, for {spec.duration_s:g} s on {', '.join(functions)}"
    )
    return ClosedLoopPlan(
        clients=clients,
        duration_s=min(spec.duration_s, max_duration_s),
        max_requests=max_requests,
        description=description,
    )

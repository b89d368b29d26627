"""Timing operators on this server: repetitions, clocks, thread counts, per-call overheads.

Measurement is built for a noisy shared machine:

- Warm-up calls (kernel selection, first allocations) and a few milliseconds of settling
  come first.
- Then come repetitions of an inner loop long enough to beat timer resolution. Each thread
  count is measured in a block of its own, as a worker runs at one count. Thread counts are
  set with `torch.set_num_threads`.
- A repetition is timed on the calling thread's CPU clock: the time a core actually ran it,
  i.e. its latency on dedicated cores. The wall clock is recorded too.
- Before each repetition the intra-op thread pool is woken up at several threads, as a
  model's previous operator leaves it. A short call (`REWARM_BELOW_S`) runs once untimed,
  so the repetition times it warm, as it runs back to back.
- The figure kept is the mean of the fastest half of the repetitions: a mean trimmed on the
  slow side only, since contention from other processes only ever adds time. The median is
  kept too. A run whose inter-quartile spread is large is measured again, keeping the
  faster result.
- With a reference kernel (`reference`), every repetition is paired with a call of it at the
  same thread count: the machine speed index (`speed`) at the moment it was measured.
- A repetition at several threads during which our threads waited for a core another
  process held (the scheduler's run-queue delay, see `contention`) is discarded and
  measured again, a bounded number of times. `Measurement.redone`/`contended` count them.

Per-call overheads and cache sizes are `calibration`'s; a profiling run over a database is
`profiling`'s.

Imports torch. Owns timing; must not make predictions.
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import torch

from infless.clock import perf_s, thread_cpu_s
from infless.profiler.contention import RepetitionGuard, contended, run_delay_ns
from infless.profiler.database import Config

POWERS_OF_TWO_BATCHES: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
Clock = Literal["thread", "wall"]
# Below this, each repetition starts with one untimed call: what ran in between (the
# reference kernel) evicted the call's data, and a repetition of a few
# calls would time one cold call in a few (measured: mnist at b1/b8 5-12% slower without it,
# dssm at b4 and resnet-20-cifar at b2 about 5%).
# Longer calls keep their timed calls cold-started: the difference is small, the cost not.
REWARM_BELOW_S = 0.01
SETTLE_S = 0.005  # untimed calls after switching thread counts, before timing (see below)


def available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


@dataclass(frozen=True, slots=True)
class ProfilePlan:
    """Which configurations to measure, and how hard."""

    batches: tuple[int, ...] = POWERS_OF_TWO_BATCHES
    threads: tuple[int, ...] = (1,)
    gpu_pcts: tuple[int, ...] = (0,)
    budget_s: float = 0.1  # target measuring time per configuration (after warm-up)
    min_reps: int = 5
    max_reps: int = 15

    @staticmethod
    def for_machine(max_threads: int | None = None, **kwargs: object) -> ProfilePlan:
        cores = available_cpus() if max_threads is None else max(1, max_threads)
        return ProfilePlan(threads=tuple(range(1, cores + 1)), **kwargs)  # type: ignore[arg-type]

    def configs(self) -> list[Config]:
        return [(b, c, g) for g in self.gpu_pcts for c in self.threads for b in self.batches]


@dataclass(frozen=True, slots=True)
class Measurement:
    """Per-call latency statistics in ms on the chosen clock; `wall_fast_ms` on the wall clock."""

    median_ms: float
    fast_ms: float  # mean of the fastest half of the repetitions: the figure profiles keep
    min_ms: float
    spread: float  # inter-quartile range / median
    reps: int
    wall_fast_ms: float = 0.0
    ref_ms: float = 0.0  # the paired reference kernel, over the repetitions fast_ms averages
    redone: int = 0  # repetitions discarded as contended and measured again (`contention`)
    contended: int = 0  # repetitions kept although contended (their retries ran out)


def summarise(
    samples: list[float],
    wall: list[float],
    ref: list[float],
    guard: RepetitionGuard | None = None,
) -> Measurement:
    """Statistics of per-call times; `ref[i]` is the reference kernel paired with `samples[i]`;
    `guard` counted the contended repetitions."""
    median = statistics.median(samples)
    q = statistics.quantiles(samples, n=4) if len(samples) >= 2 else [median, median, median]
    spread = (q[2] - q[0]) / median if median > 0 else 0.0
    half = max(1, len(samples) // 2)
    fastest = sorted(range(len(samples)), key=samples.__getitem__)[:half]
    return Measurement(
        median_ms=median,
        fast_ms=statistics.fmean(samples[i] for i in fastest),
        min_ms=min(samples),
        spread=spread,
        reps=len(samples),
        wall_fast_ms=statistics.fmean(sorted(wall)[:half]),
        ref_ms=statistics.fmean(ref[i] for i in fastest) if ref else 0.0,
        redone=guard.redone if guard else 0,
        contended=guard.kept if guard else 0,
    )


_TASKS = Path("/proc/self/task")


def _run_delay_ms() -> float | None:
    """How long (ms) this process's threads have waited on run queues in all (None: unknown)."""
    lines = []
    try:
        for task in _TASKS.iterdir():
            try:
                lines.append((task / "schedstat").read_text())
            except OSError:  # a thread that has just exited
                continue
    except OSError:
        return None
    return run_delay_ns(lines) / 1e6 if lines else None


_WAKE = torch.ones(1 << 18)  # an elementwise op over it is split across every thread


def _wake_pool() -> None:
    """Run one short parallel region, so the intra-op threads are spinning, not asleep.

    Inside a model, each operator's parallel region follows the previous operator's within
    microseconds and finds the pool's threads awake; an operator timed alone right after
    something else (the reference kernel) would pay for waking them on each repetition
    instead: tens of microseconds, a large share of a small-batch operator's time at several
    threads.
    """
    torch.mul(_WAKE, 1.0)


def _waited_since(before_ms: float | None) -> float:
    """How long (ms) our threads have waited for a core since `_run_delay_ms()` read
    `before_ms` (0 when it was not read, e.g. at one thread, or cannot be read)."""
    if before_ms is None:
        return 0.0
    after_ms = _run_delay_ms()
    return 0.0 if after_ms is None else after_ms - before_ms


def _time_reference(reference: Callable[[], object], count: int, clock: Clock) -> float:
    """One timed call (ms) of the speed index's kernel at `count` threads, after an untimed
    one that brings its data back into the caches the measured call evicted. At several
    threads a call during which a neighbour held a core is timed again (bounded), as
    measured repetitions are: the index is the cores' speed, not their availability."""
    guard = RepetitionGuard()
    reference()
    while True:
        delay_before = _run_delay_ms() if count > 1 else None
        started, cpu_started = perf_s(), thread_cpu_s()
        reference()
        wall_ms = (perf_s() - started) * 1000.0
        cpu_ms = (thread_cpu_s() - cpu_started) * 1000.0
        if guard.accept(contended(_waited_since(delay_before), wall_ms)):
            return cpu_ms if clock == "thread" else wall_ms


def _settled_estimate(fn: Callable[[], object], count: int) -> float:
    """Switch to `count` threads, warm `fn` up and settle; its time per call (s), estimated.

    The first call chooses kernels and allocates. Then short calls run untimed for
    `SETTLE_S`: right after this process ran at another thread count, a small model runs
    slower for a few milliseconds (measured: mnist at b8 on one thread, 15 % slower for
    3-6 ms after a two-thread run), which a worker, fixed at one count, never sees.
    """
    torch.set_num_threads(count)
    started = perf_s()
    fn()
    estimate_s = perf_s() - started
    if estimate_s < 0.05:  # big calls: the warm-up will do
        settle_until = perf_s() + SETTLE_S
        while True:
            started = perf_s()
            fn()
            now = perf_s()
            estimate_s = min(estimate_s, now - started)
            if now >= settle_until:
                break
    return max(estimate_s, 1e-7)


def _run_at(
    fn: Callable[[], object],
    count: int,
    budget_s: float,
    min_reps: int,
    max_reps: int,
    clock: Clock,
    reference: Callable[[], object] | None = None,
) -> Measurement:
    """Repetitions of `fn()` at `count` threads, after `_settled_estimate`."""
    estimate_s = _settled_estimate(fn, count)
    inner = max(1, math.ceil(0.001 / estimate_s))  # each repetition lasts >= ~1 ms
    floor = 3 if estimate_s > 0.1 else min_reps  # big operators: fewer repetitions
    reps = max(floor, min(max_reps, int(budget_s / (estimate_s * inner))))
    cap_s = 5 * estimate_s * inner + 0.005
    samples: list[float] = []
    wall: list[float] = []
    ref: list[float] = []
    guard = RepetitionGuard()
    rewarm = estimate_s < REWARM_BELOW_S
    for _ in range(reps):
        while True:  # until a repetition no neighbour interfered with, or retries run out
            if rewarm:  # untimed: the caches as the timed calls leave them for each other
                fn()
            elif count > 1:
                _wake_pool()
            delay_before = _run_delay_ms() if count > 1 else None
            done, started, cpu_started = 0, perf_s(), thread_cpu_s()
            while done < inner:  # cut short when contention makes a repetition drag on
                fn()
                done += 1
                if done % 8 == 0 and perf_s() - started > cap_s:
                    break
            elapsed_s = perf_s() - started
            cpu_s = thread_cpu_s() - cpu_started
            # one thread: its CPU clock already leaves out waiting for a core (not read)
            waited = _waited_since(delay_before)
            if guard.accept(contended(waited, elapsed_s * 1000.0)):
                break
        wall_ms = elapsed_s / done * 1000.0
        cpu_ms = cpu_s / done * 1000.0
        wall.append(wall_ms)
        samples.append(cpu_ms if clock == "thread" else wall_ms)
        if reference is not None:  # right after, at the same thread count
            ref.append(_time_reference(reference, count, clock))
    return summarise(samples, wall, ref, guard)


def measure_threads(
    fn: Callable[[], object],
    threads: Sequence[int],
    *,
    budget_s: float = 0.25,
    min_reps: int = 5,
    max_reps: int = 25,
    max_spread: float = 0.25,
    clock: Clock = "thread",
    reference: Callable[[], object] | None = None,
) -> dict[int, Measurement]:
    """Per-call latency (ms) of `fn()` at each thread count, under inference mode.

    `clock="thread"` (the default) times the calling thread's CPU time: on a shared machine
    it leaves out the time the thread waits for a core another process holds, so it is the
    latency the call would have with dedicated cores (what an instance's cpuset gives it);
    the calling thread works in every parallel region, so with several threads it still
    follows the wall clock of an unshared run. `clock="wall"` times the wall clock. Thread
    counts are measured one after another, each in a block of its own after settling, as a
    worker runs at one count (switching counts back and forth slows small calls down, see
    `_settled_estimate`); a count whose spread exceeds `max_spread` is measured again,
    keeping the faster result. With `reference` (the speed index's kernel), each repetition
    is followed by two calls of it at the same thread count (the first warms its data up
    again, the second is timed, and timed again if a neighbour held a core meanwhile), and
    `Measurement.ref_ms` is the timed call's mean over the repetitions `fast_ms` averages:
    the machine's speed while the figure kept was measured.
    """
    if not threads:
        raise ValueError("measure_threads needs at least one thread count")
    previous = torch.get_num_threads()
    found: dict[int, Measurement] = {}
    try:
        with torch.inference_mode():
            for count in threads:
                best = _run_at(fn, count, budget_s, min_reps, max_reps, clock, reference)
                if best.spread > max_spread:
                    again = _run_at(fn, count, budget_s, min_reps, max_reps, clock, reference)
                    best = replace(
                        min(best, again, key=lambda m: m.fast_ms),
                        redone=best.redone + again.redone,
                        contended=best.contended + again.contended,
                    )
                found[count] = best
    finally:
        torch.set_num_threads(previous)
    return found


def measure(
    fn: Callable[[], object], *, threads: int, budget_s: float = 0.25, **kwargs: Any
) -> Measurement:
    """Latency (ms) of `fn()` with `threads` intra-op threads (see `measure_threads`)."""
    return measure_threads(fn, (threads,), budget_s=budget_s, **kwargs)[threads]

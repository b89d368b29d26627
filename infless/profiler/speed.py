"""The machine speed index: how fast this server runs a fixed reference kernel right now.

This machine's speed drifts (a virtual machine whose host is shared: up to ~2x within
minutes, on the thread CPU clock too, so it is not waiting for a core but running slower).
Operator profiles taken at different moments therefore disagree, and a prediction made
from them at another moment inherits the speed of the moment each operator was profiled.
The cure is a yardstick: a fixed reference kernel (`infless.profiler.reference`) is timed
right after every repetition of every operator measurement and stored with the profile
(`ProfileRow.ref_ms`: its mean over the repetitions the profiled figure averages), and
timed again when a prediction should hold for "now". A profiled time then scales by
`ref_now / ref_at_profile` (the kernel on one thread, paired with the same thread count).

Memory: the reference kernel lives in the caches, and the host's memory bandwidth drifts
on its own (minutes-long states in which streaming from DRAM runs far slower or faster while
the cache-resident kernel does not move). A second, memory-streaming kernel (a pass over a
buffer twice the LLC, one thread; `SpeedIndex.mem_ms`) is timed next to every measurement
and stored with the rows (`ProfileRow.mem_ms`). It scales only the part of a time that is
streaming weights from DRAM, which the profiles isolate: a cold figure (weights out of the
LLC) minus the warm one (weights in the LLC). So a row rescales as
`warm * ref_ratio + (cold - warm) * mem_ratio`, a roofline split with no parameter.

This corrects host drift only. The reference kernels is fixed and knows nothing of the
models; no factor here is fitted against measured model latencies.

Pure: no I/O, no clock, no torch.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from infless.profiler.database import ProfileRow

# Names the reference kernel; indices measured with different kernels do not compare. Change
# it whenever `infless.profiler.reference` changes what it runs.
REFERENCE_KERNEL = "conv3x3-64ch-28px+mm-256x512x256/one-thread/v3"
MEMORY_KERNEL = "sum-over-2xLLC-float32/one-thread/v1"  # likewise for `reference.memory_kernel`


@dataclass(frozen=True, slots=True)
class SpeedIndex:
    """The reference kernel's time in ms, on one thread, paired with measurements at each
    thread count (cpus -> ms), at one moment.

    Larger is slower. `ref_ms` holds (cpus, ms) pairs, cpus ascending, every ms > 0. The
    kernel always runs on one thread: the speed of a core is what drifts with the host.
    Timed on two threads it would also read whether the second core is free at that
    instant, which is contention, not speed, and which most operators do not feel: on this
    machine, with a neighbour on the other core, the two-thread kernel ran 3-30x slower next
    to small operators whose own two-thread times did not change.
    """

    ref_ms: tuple[tuple[int, float], ...]
    mem_ms: float = 0.0  # the memory-streaming kernel on one thread (0: not measured)

    @staticmethod
    def of(values: Mapping[int, float], mem_ms: float = 0.0) -> SpeedIndex:
        pairs = tuple(sorted((int(c), float(ms)) for c, ms in values.items() if ms > 0))
        return SpeedIndex(pairs, max(0.0, float(mem_ms)))

    def at(self, cpus: int) -> float | None:
        """The time at `cpus` threads, else at the largest measured count below (or None)."""
        below = [ms for c, ms in self.ref_ms if c <= cpus]
        return below[-1] if below else None

    def as_dict(self) -> dict[int, float]:
        return dict(self.ref_ms)


def speed_factor(now: SpeedIndex | None, then: SpeedIndex | None, cpus: int) -> float:
    """How many times longer anything takes now than then at `cpus` threads (1 if unknown)."""
    if now is None or then is None:
        return 1.0
    now_ms, then_ms = now.at(cpus), then.at(cpus)
    if now_ms is None or then_ms is None:
        return 1.0
    return now_ms / then_ms


def memory_factor(now: SpeedIndex | None, then: SpeedIndex | None) -> float | None:
    """How many times longer streaming from DRAM takes now than then (None: unknown)."""
    if now is None or then is None or now.mem_ms <= 0 or then.mem_ms <= 0:
        return None
    return now.mem_ms / then.mem_ms


def split_scale(warm_ms: float, cold_ms: float, ref_factor: float, mem_factor: float) -> float:
    """A cold time rescaled: its warm part by `ref_factor`, the rest (streaming weights from
    DRAM) by `mem_factor`. A cold time at or below the warm one is all warm."""
    return warm_ms * ref_factor + max(0.0, cold_ms - warm_ms) * mem_factor


def typical_index(
    points: Iterable[tuple[int, float]], mem_points: Iterable[float] = ()
) -> SpeedIndex | None:
    """The median reference time per thread count of stored (cpus, ref_ms) points, and the
    median memory-kernel time of `mem_points` (None: no reference point).

    Points with times <= 0 (profiled before the index existed) are left out.
    """
    by_cpus: dict[int, list[float]] = {}
    for cpus, ref_ms in points:
        if ref_ms > 0:
            by_cpus.setdefault(cpus, []).append(ref_ms)
    if not by_cpus:
        return None
    mems = [ms for ms in mem_points if ms > 0]
    return SpeedIndex.of(
        {c: statistics.median(v) for c, v in by_cpus.items()},
        statistics.median(mems) if mems else 0.0,
    )


def rescale(row: ProfileRow, ref_ms: float, mem_ms: float = 0.0) -> ProfileRow:
    """`row` as it would have measured when the reference kernel took `ref_ms` and the
    memory kernel `mem_ms`.

    A row without an index (ref_ms 0) is returned unchanged: its speed is unknown. Without a
    memory time on either side, the cold figure scales like the warm one.
    """
    if row.ref_ms <= 0 or ref_ms <= 0:
        return row
    factor = ref_ms / row.ref_ms
    known = row.mem_ms > 0 and mem_ms > 0
    cold_ms = row.cold_ms * factor
    if known and row.cold_ms > 0:
        cold_ms = split_scale(row.time_ms, row.cold_ms, factor, mem_ms / row.mem_ms)
    return replace(
        row,
        time_ms=row.time_ms * factor,
        min_ms=row.min_ms * factor,
        cold_ms=cold_ms,
        ref_ms=ref_ms,
        mem_ms=mem_ms if known else row.mem_ms,
    )


def normalise(rows: Iterable[ProfileRow], base: SpeedIndex | None) -> list[ProfileRow]:
    """Every row rescaled to the speed `base` gives its thread count (unchanged when unknown)."""
    result = []
    for row in rows:
        target = None if base is None else base.at(row.cpus)
        mem = 0.0 if base is None else base.mem_ms
        result.append(row if target is None else rescale(row, target, mem))
    return result

"""The machine speed index: how fast this server runs a fixed reference kernel right now.

This machine's speed drifts (a virtual machine whose host is shared: up to ~2x within
minutes, on the thread CPU clock too, so it is not waiting for a core but running slower).
Operator profiles taken at different moments therefore disagree, and a prediction made
from them at another moment inherits the speed of the moment each operator was profiled.
The cure is a yardstick: a fixed reference kernel (`infless.profiler.reference`) is timed
right after every repetition of every operator measurement and stored with the profile
(`ProfileRow.ref_ms`: its mean over the repetitions the profiled figure averages), and
timed again when a prediction should hold for "now". A profiled time then scales by
`ref_now / ref_at_profile` (the kernel at the same thread count as the measurement).

This corrects host drift only. The reference kernel is fixed and knows nothing of the
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
REFERENCE_KERNEL = "conv3x3-64ch-28px+mm-256x512x256/same-threads/v4"


@dataclass(frozen=True, slots=True)
class SpeedIndex:
    """The reference kernel's time in ms at each thread count (cpus -> ms), at one moment.

    Larger is slower. `ref_ms` holds (cpus, ms) pairs, cpus ascending, every ms > 0.

    The kernel runs at the thread count of the measurement it is paired with, because this
    host's cores drift apart. Timed on each core in turn every 0.3 s, one core was
    0.54-1.44x as fast as the other. A parallel region waits for the slower one; a
    one-thread kernel on the calling thread's core does not see that.

    A call during which a neighbour held one of the cores is timed again (`operators`), so
    the index reads the cores' speed, not whether they were free. Untimed for contention,
    the two-thread kernel ran 3-30x slower next to a neighbour, while small operators did
    not.
    """

    ref_ms: tuple[tuple[int, float], ...]

    @staticmethod
    def of(values: Mapping[int, float]) -> SpeedIndex:
        pairs = tuple(sorted((int(c), float(ms)) for c, ms in values.items() if ms > 0))
        return SpeedIndex(pairs)

    def at(self, cpus: int) -> float | None:
        """The time at `cpus` threads, else at the largest measured count below (or None)."""
        below = [ms for c, ms in self.ref_ms if c <= cpus]
        return below[-1] if below else None


def speed_factor(now: SpeedIndex | None, then: SpeedIndex | None, cpus: int) -> float:
    """How many times longer anything takes now than then at `cpus` threads (1 if unknown)."""
    if now is None or then is None:
        return 1.0
    now_ms, then_ms = now.at(cpus), then.at(cpus)
    if now_ms is None or then_ms is None:
        return 1.0
    return now_ms / then_ms


def typical_index(points: Iterable[tuple[int, float]]) -> SpeedIndex | None:
    """The median reference time per thread count of stored (cpus, ref_ms) points (None: none).

    Points with ref_ms <= 0 (profiled before the index existed) are left out.
    """
    by_cpus: dict[int, list[float]] = {}
    for cpus, ref_ms in points:
        if ref_ms > 0:
            by_cpus.setdefault(cpus, []).append(ref_ms)
    if not by_cpus:
        return None
    return SpeedIndex.of({c: statistics.median(v) for c, v in by_cpus.items()})


def rescale(row: ProfileRow, ref_ms: float) -> ProfileRow:
    """`row` as it would have measured when the reference kernel took `ref_ms`.

    A row without an index (ref_ms 0) is returned unchanged: its speed is unknown.
    """
    if row.ref_ms <= 0 or ref_ms <= 0:
        return row
    factor = ref_ms / row.ref_ms
    return replace(
        row,
        time_ms=row.time_ms * factor,
        min_ms=row.min_ms * factor,
        cold_ms=row.cold_ms * factor,
        ref_ms=ref_ms,
    )


def normalise(rows: Iterable[ProfileRow], base: SpeedIndex | None) -> list[ProfileRow]:
    """Every row rescaled to the speed `base` gives its thread count (unchanged when unknown)."""
    result = []
    for row in rows:
        target = None if base is None else base.at(row.cpus)
        result.append(row if target is None else rescale(row, target))
    return result

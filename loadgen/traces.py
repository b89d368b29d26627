"""Azure Functions traces as rows to replay: one row per function, pattern classes, row choice.

Pure: no I/O beyond `read_trace` (which only opens the file it is given), no clock, no network.
The files are parsed by `loadgen.tracefile`, the one trace parser (both schemas, plain or
gzip-compressed); here each function becomes a `TraceRow`.

Pattern classes (a heuristic on one row's day of counts, checked in this order):

1. `idle`      fewer than 2 active minutes (nothing to replay);
2. `sporadic`  active in fewer than 5 % of minutes and the gaps between active minutes are
               irregular (gap coefficient of variation >= 1);
3. `periodic`  regular gaps (gap CV < 0.5) and no spike: peak <= 10 x the median active-minute
               count (timers and steady always-on load);
4. `bursty`    peak > 10 x the day's mean per-minute count and >= 5 x the median active-minute
               count (a spike far above both the day and a typical active minute);
5. `other`     everything else.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from loadgen.tracefile import (
    TraceFormatError,
    TraceTable,
    open_trace,
    parse_table,
    read_table,
)

__all__ = ["TraceFormatError", "open_trace"]  # re-exported: the load generator's callers

PatternClass = Literal["idle", "sporadic", "periodic", "bursty", "other"]
PATTERN_CLASSES: tuple[PatternClass, ...] = ("idle", "sporadic", "periodic", "bursty", "other")

MINUTES_PER_DAY = 1440
SPORADIC_MAX_ACTIVE_FRACTION = 0.05
SPORADIC_MIN_GAP_CV = 1.0
PERIODIC_MAX_GAP_CV = 0.5
SPIKE_OVER_MEDIAN_ACTIVE = 10.0
BURSTY_PEAK_OVER_DAY_MEAN = 10.0
BURSTY_PEAK_OVER_MEDIAN_ACTIVE = 5.0


@dataclass(frozen=True, slots=True)
class TraceRow:
    """One function's day: invocation counts per minute (index 0 = the file's first minute)."""

    function_id: str
    app_id: str
    owner_id: str
    trigger: str  # "" in the InVitro sample, which has no Trigger column
    counts_per_minute: tuple[int, ...]

    @property
    def total_invocations(self) -> int:
        return sum(self.counts_per_minute)


@dataclass(frozen=True, slots=True)
class RowFeatures:
    """The numbers the classifier looks at, kept so `loadgen classify` can show them."""

    active_minutes: int
    active_fraction: float
    gap_cv: float  # coefficient of variation of gaps between active minutes; nan if < 2 active
    peak_count: int
    day_mean_count: float
    median_active_count: float


def table_rows(table: TraceTable) -> list[TraceRow]:
    """One `TraceRow` per function of a parsed trace file, in file order."""
    triggers = table.triggers or ("",) * table.n_functions
    return [
        TraceRow(
            function_id=table.function_ids[i],
            app_id=table.app_ids[i],
            owner_id=table.owner_ids[i],
            trigger=triggers[i],
            counts_per_minute=tuple(int(c) for c in table.counts[i].tolist()),
        )
        for i in range(table.n_functions)
    ]


def parse_trace_lines(lines: Iterable[str], source: str = "<trace>") -> list[TraceRow]:
    """Parse either schema from CSV text lines (the header first); see `loadgen.tracefile`."""
    return table_rows(parse_table(lines, source))


def read_trace(path: Path) -> list[TraceRow]:
    """Read a trace CSV file (either schema), plain or gzip-compressed."""
    return table_rows(read_table(path))


def row_features(counts: Sequence[int]) -> RowFeatures:
    array = np.asarray(counts, dtype=np.int64)
    active = np.flatnonzero(array)
    minutes = max(len(array), 1)
    if len(active) >= 2:
        gaps = np.diff(active).astype(np.float64)
        gap_cv = float(gaps.std() / gaps.mean())
    else:
        gap_cv = float("nan")
    return RowFeatures(
        active_minutes=len(active),
        active_fraction=len(active) / minutes,
        gap_cv=gap_cv,
        peak_count=int(array.max()) if len(array) else 0,
        day_mean_count=float(array.mean()) if len(array) else 0.0,
        median_active_count=float(statistics.median(array[active].tolist()))
        if len(active)
        else 0.0,
    )


def classify_features(features: RowFeatures) -> PatternClass:
    """The heuristic in the module docstring, on precomputed features."""
    if features.active_minutes < 2:
        return "idle"
    if (
        features.active_fraction < SPORADIC_MAX_ACTIVE_FRACTION
        and features.gap_cv >= SPORADIC_MIN_GAP_CV
    ):
        return "sporadic"
    if (
        features.gap_cv < PERIODIC_MAX_GAP_CV
        and features.peak_count <= SPIKE_OVER_MEDIAN_ACTIVE * features.median_active_count
    ):
        return "periodic"
    if (
        features.peak_count > BURSTY_PEAK_OVER_DAY_MEAN * features.day_mean_count
        and features.peak_count >= BURSTY_PEAK_OVER_MEDIAN_ACTIVE * features.median_active_count
    ):
        return "bursty"
    return "other"


def classify_counts(counts: Sequence[int]) -> PatternClass:
    return classify_features(row_features(counts))


def find_rows(rows: Sequence[TraceRow], row_ids: Sequence[str]) -> list[TraceRow]:
    """Rows by function ID (HashFunction), or a unique prefix of it, in the order asked."""
    chosen: list[TraceRow] = []
    for wanted in row_ids:
        matches = [r for r in rows if r.function_id == wanted]
        if not matches:
            matches = [r for r in rows if r.function_id.startswith(wanted)]
        if not matches:
            raise TraceFormatError(f"row id {wanted!r}: no trace row has that HashFunction")
        if len(matches) > 1 and len({r.function_id for r in matches}) > 1:
            raise TraceFormatError(
                f"row id {wanted!r}: prefix matches {len(matches)} rows; give more characters"
            )
        chosen.append(matches[0])
    return chosen


def choose_rows_by_pattern(
    rows: Sequence[TraceRow],
    pattern: PatternClass,
    count: int,
    seed: int,
    min_invocations: int = 0,
) -> list[TraceRow]:
    """`count` rows of the class, chosen with a seeded shuffle (same seed, same rows)."""
    candidates = [
        r
        for r in rows
        if r.total_invocations >= min_invocations
        and classify_counts(r.counts_per_minute) == pattern
    ]
    if len(candidates) < count:
        raise TraceFormatError(
            f"pattern {pattern!r}: {len(candidates)} rows qualify "
            f"(min invocations {min_invocations}), {count} wanted"
        )
    rng = np.random.default_rng(seed)
    picks = rng.permutation(len(candidates))[:count]
    return [candidates[int(i)] for i in picks]


def busiest_window_start(rows: Sequence[TraceRow], window_minutes: int) -> int:
    """The first minute of the window with the most activity, each row weighted by its peak.

    Rows are normalised (count / row peak) so a high-volume row does not hide the others;
    ties go to the earliest window.
    """
    if not rows:
        raise TraceFormatError("no trace rows to choose a window from")
    length = min(len(r.counts_per_minute) for r in rows)
    window = max(1, min(window_minutes, length))
    total = np.zeros(length, dtype=np.float64)
    for row in rows:
        counts = np.asarray(row.counts_per_minute[:length], dtype=np.float64)
        peak = counts.max()
        if peak > 0:
            total += counts / peak
    sums = np.convolve(total, np.ones(window), mode="valid")
    return int(np.argmax(sums))

"""The cold-start evaluation's trace: invocation counts, per-app memory and pattern classes.

Owns: the evaluation's `Trace` (one row of per-minute counts per function), the memory file
parsed into each function's `memory_mb`, and the rough pattern classes (sporadic, periodic,
bursty) that split the results.

The invocation files are parsed by the one trace parser, `loadgen.tracefile` (both schemas;
plain or gzip-compressed, a `.gz` suffix). `load_*` read the file they are given; `parse_*`
work on text and are pure.

The memory file (`app_memory_percentiles`, or `examples/traces/1000_mem.csv.gz`) has the
columns `HashOwner`, `HashApp` and `AverageAllocatedMb`, in any order. Memory is per app:
each function gets its app's value. The unit of the cold-start replay is the function.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from loadgen.tracefile import TraceTable, parse_table_text, read_table, read_text

DEFAULT_MEMORY_MB = 256.0
PATTERN_CLASSES = ("sporadic", "periodic", "bursty", "other", "few")


@dataclass(frozen=True, slots=True)
class Trace:
    """Per-minute invocation counts, one row per function."""

    function_ids: tuple[str, ...]
    app_keys: tuple[tuple[str, str], ...]  # (HashOwner, HashApp) per function
    triggers: tuple[str, ...] | None  # only in the original schema
    counts: NDArray[np.int64]  # (functions, minutes)
    schema: str  # "sample" or "azure2019"

    @property
    def n_functions(self) -> int:
        return int(self.counts.shape[0])

    @property
    def n_minutes(self) -> int:
        return int(self.counts.shape[1])


def trace_of(table: TraceTable, source: str) -> Trace:
    """The evaluation's view of a parsed trace file: it needs at least one function.

    A function is named by HashFunction in the sample schema. In the 2019 schema it is
    `owner/app/function`, since a HashFunction there is unique only within its app.
    """
    if table.n_functions < 1:
        raise ValueError(f"{source}: needs at least one minute column and one function row")
    if table.schema == "sample":
        function_ids = table.function_ids
    else:
        function_ids = tuple(
            f"{owner}/{app}/{function}"
            for owner, app, function in zip(
                table.owner_ids, table.app_ids, table.function_ids, strict=True
            )
        )
    return Trace(
        function_ids=function_ids,
        app_keys=tuple(zip(table.owner_ids, table.app_ids, strict=True)),
        triggers=table.triggers,
        counts=table.counts,
        schema=table.schema,
    )


def parse_trace(text: str, source: str = "<text>") -> Trace:
    """Parse an invocation-count CSV in either schema; errors name the file, line and fix."""
    return trace_of(parse_table_text(text, source), source)


def load_trace(path: Path) -> Trace:
    return trace_of(read_table(path), str(path))


def parse_memory(text: str, source: str = "<text>") -> dict[tuple[str, str], float]:
    """Map (HashOwner, HashApp) -> AverageAllocatedMb."""
    reader = csv.DictReader(io.StringIO(text))
    needed = {"HashOwner", "HashApp", "AverageAllocatedMb"}
    missing = needed - set(reader.fieldnames or [])
    if missing:
        raise ValueError(
            f"{source}: missing column(s) {', '.join(sorted(missing))}; expected the Azure "
            "app_memory_percentiles header (HashOwner, HashApp, ..., AverageAllocatedMb, ...)"
        )
    memory: dict[tuple[str, str], float] = {}
    for lineno, row in enumerate(reader, start=2):
        try:
            mb = float(row["AverageAllocatedMb"])
        except ValueError as exc:
            raise ValueError(
                f"{source}:{lineno}: AverageAllocatedMb={row['AverageAllocatedMb']!r} "
                "is not a number"
            ) from exc
        if mb > 0:
            memory[(row["HashOwner"].strip(), row["HashApp"].strip())] = mb
    return memory


def load_memory(path: Path) -> dict[tuple[str, str], float]:
    return parse_memory(read_text(path), source=str(path))


def memory_per_function(
    trace: Trace,
    memory: dict[tuple[str, str], float] | None,
    default_mb: float = DEFAULT_MEMORY_MB,
) -> tuple[NDArray[np.float64], int]:
    """Each function's memory (MB) and how many fell back to a default.

    Without a memory table every function gets `default_mb`. With one, a function whose app
    is missing gets the table's median, so it weighs like a typical app.
    """
    if not memory:
        return np.full(trace.n_functions, default_mb, dtype=np.float64), trace.n_functions
    fallback = float(np.median(np.fromiter(memory.values(), dtype=np.float64)))
    values = [memory.get(key) for key in trace.app_keys]
    missing = sum(v is None for v in values)
    mb = np.array([fallback if v is None else v for v in values], dtype=np.float64)
    return mb, missing


def classify_patterns(counts: NDArray[np.int64]) -> NDArray[np.str_]:
    """Rough pattern class per function (the traces README's heuristic, first match wins):
    few (< 2 active minutes), sporadic (active < 5 % of minutes and CV of the gaps between
    active minutes >= 1), periodic (gap CV < 0.5), bursty (peak minute > 10x the mean),
    other."""
    labels = np.full(counts.shape[0], "other", dtype="<U8")
    n_minutes = counts.shape[1]
    for i, row in enumerate(counts):
        active = np.flatnonzero(row)
        if active.size < 2:
            labels[i] = "few"
            continue
        gaps = np.diff(active).astype(np.float64)
        gap_cv = float(gaps.std() / gaps.mean())
        if active.size < 0.05 * n_minutes and gap_cv >= 1.0:
            labels[i] = "sporadic"
        elif gap_cv < 0.5:
            labels[i] = "periodic"
        elif row.max() > 10.0 * row.mean():
            labels[i] = "bursty"
    return labels

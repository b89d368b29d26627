"""Azure Functions 2019 trace files: per-minute invocation counts and per-app memory.

Owns: parsing the two invocation schemas into a `Trace`, the memory file into per-function
`memory_mb`, and the rough pattern classes (sporadic / periodic / bursty) used to split
results. Reads files only when asked (`load_*`, plain or gzip-compressed: a `.gz` suffix);
`parse_*` work on text and are pure.

Schemas accepted (detected from the header):
* sample (`examples/traces/1000_inv.csv.gz`): `HashFunction,HashApp,HashOwner,minute_1,...`
* original 2019: `HashOwner,HashApp,HashFunction,Trigger,1,...,N`
Memory (`app_memory_percentiles` / `examples/traces/1000_mem.csv.gz`): columns `HashOwner`,
`HashApp`, `AverageAllocatedMb` in any order. Memory is per app; each function gets its app's
value.
The unit of the cold-start replay is the function.
"""

from __future__ import annotations

import csv
import gzip
import io
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import numpy as np
from numpy.typing import NDArray

DEFAULT_MEMORY_MB = 256.0
PATTERN_CLASSES = ("sporadic", "periodic", "bursty", "other", "few")

_SAMPLE_IDS = ["HashFunction", "HashApp", "HashOwner"]
_AZURE_IDS = ["HashOwner", "HashApp", "HashFunction", "Trigger"]
_GZIP_ERRORS = (gzip.BadGzipFile, EOFError, zlib.error)


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


def parse_trace(text: str, source: str = "<text>") -> Trace:
    """Parse an invocation-count CSV in either schema; errors name the file, line and fix."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise ValueError(f"{source}: empty file; expected a header and one row per function")
    header = [h.strip() for h in lines[0].split(",")]
    if header[:3] == _SAMPLE_IDS:
        schema, n_ids = "sample", 3
    elif header[:4] == _AZURE_IDS:
        schema, n_ids = "azure2019", 4
    else:
        raise ValueError(
            f"{source}: header starts {','.join(header[:4])!r}; expected "
            f"{','.join(_SAMPLE_IDS)},minute_1,... or {','.join(_AZURE_IDS)},1,..."
        )
    n_minutes = len(header) - n_ids
    if n_minutes < 1 or len(lines) < 2:
        raise ValueError(f"{source}: needs at least one minute column and one function row")
    ids: list[list[str]] = []
    tails: list[str] = []
    for lineno, line in enumerate(lines[1:], start=2):
        parts = line.split(",", n_ids)
        if len(parts) != n_ids + 1 or parts[n_ids].count(",") != n_minutes - 1:
            found = len(line.split(","))
            raise ValueError(
                f"{source}:{lineno}: {found} columns, header has {len(header)}; "
                "every row needs its IDs and one count per minute"
            )
        ids.append([p.strip() for p in parts[:n_ids]])
        tails.append(parts[n_ids])
    try:
        counts = np.loadtxt(tails, delimiter=",", dtype=np.int64, ndmin=2)
    except ValueError as exc:
        raise ValueError(
            f"{source}: invocation counts must be non-negative integers ({exc})"
        ) from exc
    if counts.size and counts.min() < 0:
        row, col = np.argwhere(counts < 0)[0]
        raise ValueError(
            f"{source}:{row + 2}: column {header[n_ids + col]} is {counts[row, col]}; "
            "counts must be >= 0"
        )
    if schema == "sample":
        function_ids = tuple(r[0] for r in ids)
        app_keys = tuple((r[2], r[1]) for r in ids)
        triggers = None
    else:
        function_ids = tuple(f"{r[0]}/{r[1]}/{r[2]}" for r in ids)
        app_keys = tuple((r[0], r[1]) for r in ids)
        triggers = tuple(r[3] for r in ids)
    return Trace(function_ids, app_keys, triggers, counts, schema)


def open_text(path: Path) -> TextIO:
    """Open a CSV file as text for the csv module; a `.gz` suffix means gzip-compressed."""
    if path.suffix.lower() == ".gz":
        return gzip.open(path, "rt", encoding="utf-8", newline="")
    return path.open(encoding="utf-8", newline="")


def read_text(path: Path) -> str:
    """A CSV file's whole text, plain or gzip-compressed; a corrupt gzip file is a ValueError."""
    try:
        with open_text(path) as handle:
            return handle.read()
    except _GZIP_ERRORS as exc:
        raise ValueError(f"{path}: not a readable gzip file ({exc})") from exc


def load_trace(path: Path) -> Trace:
    return parse_trace(read_text(path), source=str(path))


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

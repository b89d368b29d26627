"""Azure Functions trace files: the one parser of per-minute invocation counts.

Owns: reading either CSV schema into a `TraceTable` (IDs per function, counts as one integer
matrix), from text or from a plain or gzip-compressed file (a `.gz` suffix). Every error is
a `TraceFormatError` that names the file, the line and what to fix.

Its users: the load generator (`loadgen.traces` turns the table into rows to replay), the
cold-start evaluation (`infless.offline.coldstart.trace`) and anything else that reads a
trace. It lives in loadgen because the load generator may import nothing of infless, while
infless may import loadgen. Pure apart from opening the file it is given: no clock, no
network, numpy only.

Schemas, told apart by their header:

* the InVitro sample (`examples/traces/1000_inv.csv.gz`):
  `HashFunction,HashApp,HashOwner,minute_1,...,minute_1440`;
* the original Azure 2019 files (`invocations_per_function_md.anon.dNN.csv`):
  `HashOwner,HashApp,HashFunction,Trigger,1,...,1440`.

Counts are non-negative integers. An empty field counts as 0, and a number written with a
decimal point keeps its integer part.
"""

from __future__ import annotations

import csv
import gzip
import io
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TextIO

import numpy as np
from numpy.typing import NDArray

Schema = Literal["sample", "azure2019"]

_INVITRO_HEADER = ("HashFunction", "HashApp", "HashOwner")
_AZURE_HEADER = ("HashOwner", "HashApp", "HashFunction", "Trigger")
_GZIP_ERRORS = (gzip.BadGzipFile, EOFError, zlib.error)


class TraceFormatError(ValueError):
    """A trace file that is neither schema, or a row that does not parse."""


@dataclass(frozen=True, slots=True)
class TraceTable:
    """A trace file's functions: their IDs, and their counts per minute as one matrix."""

    schema: Schema
    function_ids: tuple[str, ...]  # HashFunction
    app_ids: tuple[str, ...]  # HashApp
    owner_ids: tuple[str, ...]  # HashOwner
    triggers: tuple[str, ...] | None  # only in the Azure 2019 schema
    counts: NDArray[np.int64]  # shape (functions, minutes)
    minute_columns: tuple[str, ...]  # the header's names of the count columns

    @property
    def n_functions(self) -> int:
        return int(self.counts.shape[0])

    @property
    def n_minutes(self) -> int:
        return int(self.counts.shape[1])


def parse_table(lines: Iterable[str], source: str = "<trace>") -> TraceTable:
    """Parse either schema from CSV text lines, the header first; blank lines are skipped."""
    reader = csv.reader(lines)
    try:
        header = [h.strip() for h in next(reader)]
    except StopIteration:
        raise TraceFormatError(
            f"{source}: empty file; expected a CSV header and one row per function"
        ) from None
    schema, id_columns = _schema(header, source)
    if len(header) - id_columns < 1:
        raise TraceFormatError(f"{source}: header has no per-minute count columns")
    ids: list[list[str]] = []
    fields: list[list[str]] = []
    line_numbers: list[int] = []
    for line_number, row in enumerate(reader, start=2):
        if not row:
            continue
        if len(row) != len(header):
            raise TraceFormatError(
                f"{source}:{line_number}: {len(row)} fields, the header has {len(header)}; "
                "every row needs its IDs and one count per minute"
            )
        ids.append([value.strip() for value in row[:id_columns]])
        fields.append(row[id_columns:])
        line_numbers.append(line_number)
    minute_columns = tuple(header[id_columns:])
    counts = _counts(fields, line_numbers, minute_columns, source)
    if schema == "sample":
        function, app, owner = 0, 1, 2
    else:
        function, app, owner = 2, 1, 0
    return TraceTable(
        schema=schema,
        function_ids=tuple(r[function] for r in ids),
        app_ids=tuple(r[app] for r in ids),
        owner_ids=tuple(r[owner] for r in ids),
        triggers=tuple(r[3] for r in ids) if schema == "azure2019" else None,
        counts=counts,
        minute_columns=minute_columns,
    )


def parse_table_text(text: str, source: str = "<trace>") -> TraceTable:
    """Parse a whole trace file's text (either schema)."""
    return parse_table(io.StringIO(text, newline=""), source)


def open_trace(path: Path) -> TextIO:
    """Open a trace CSV as text for the csv module; a `.gz` suffix means gzip-compressed."""
    if path.suffix.lower() == ".gz":
        return gzip.open(path, "rt", encoding="utf-8", newline="")
    return path.open(newline="", encoding="utf-8")


def read_text(path: Path) -> str:
    """A CSV file's whole text, plain or gzip-compressed; a corrupt gzip file is an error."""
    try:
        with open_trace(path) as handle:
            return handle.read()
    except _GZIP_ERRORS as exc:
        raise TraceFormatError(f"{path}: not a readable gzip file ({exc})") from exc


def read_table(path: Path) -> TraceTable:
    """Read a trace CSV file (either schema), plain or gzip-compressed."""
    try:
        with open_trace(path) as handle:
            return parse_table(handle, source=str(path))
    except _GZIP_ERRORS as exc:
        raise TraceFormatError(f"{path}: not a readable gzip file ({exc})") from exc


def _schema(header: list[str], source: str) -> tuple[Schema, int]:
    """The schema a header announces, and how many ID columns come before the counts."""
    if tuple(header[:3]) == _INVITRO_HEADER:
        return "sample", 3
    if tuple(header[:4]) == _AZURE_HEADER:
        return "azure2019", 4
    raise TraceFormatError(
        f"{source}: header starts {','.join(header[:4])!r}; expected "
        f"{','.join(_INVITRO_HEADER)},minute_1,... (InVitro sample) or "
        f"{','.join(_AZURE_HEADER)},1,... (Azure 2019)"
    )


def _counts(
    fields: list[list[str]],
    line_numbers: Sequence[int],
    minute_columns: Sequence[str],
    source: str,
) -> NDArray[np.int64]:
    """The count fields as an integer matrix: numpy's parser first, then row by row to say
    which field is wrong."""
    if not fields:
        return np.zeros((0, len(minute_columns)), dtype=np.int64)
    try:
        values = np.array(fields, dtype=np.float64)
    except ValueError:
        values = _counts_row_by_row(fields, line_numbers, minute_columns, source)
    if not np.isfinite(values).all():
        values = _counts_row_by_row(fields, line_numbers, minute_columns, source)
    if values.size and values.min() < 0:
        row, column = np.argwhere(values < 0)[0]
        raise TraceFormatError(
            f"{source}:{line_numbers[row]}: column {minute_columns[column]} is "
            f"{int(values[row, column])}, a negative invocation count; counts must be >= 0"
        )
    return values.astype(np.int64)


def _counts_row_by_row(
    fields: list[list[str]],
    line_numbers: Sequence[int],
    minute_columns: Sequence[str],
    source: str,
) -> NDArray[np.float64]:
    rows: list[list[int]] = []
    for line_number, row in zip(line_numbers, fields, strict=True):
        parsed: list[int] = []
        for column, value in zip(minute_columns, row, strict=True):
            try:
                parsed.append(int(float(value)) if value.strip() else 0)
            except (ValueError, OverflowError):
                raise TraceFormatError(
                    f"{source}:{line_number}: bad count {value!r} in column {column}; "
                    "invocation counts must be non-negative integers"
                ) from None
        rows.append(parsed)
    return np.array(rows, dtype=np.float64)

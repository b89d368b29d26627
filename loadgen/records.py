"""What a run recorded: one row per request, one sample per instance poll; CSV in and out.

Pure data plus file reading/writing of exactly these records; no network, no clock.
Times are seconds since the run started (the client's monotonic clock); absent header values
are NaN (floats), 0 (batch size) or "" (strings).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable
from dataclasses import dataclass, fields
from pathlib import Path

NAN = float("nan")
NO_RESPONSE = 0  # status of a request that got no HTTP response (timeout, refused, reset)


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestRecord:
    index: int  # position in the schedule
    function: str
    scheduled_s: float  # when the schedule said to send
    sent_s: float  # when the client started the request
    latency_ms: float  # send to full response body; NaN without a response
    status: int  # HTTP status, NO_RESPONSE if none
    error: str  # "" on 200; the gateway's error code, or the client exception's name
    call_id: str = ""
    instance: str = ""
    batch_size: int = 0
    queue_ms: float = NAN
    exec_ms: float = NAN
    cold_start: bool = False
    cold_start_ms: float = NAN
    duration_ms: float = NAN  # the gateway's X-Duration-Seconds, in ms
    step: int = 0  # max-rate search step (0 for other runs)
    retry_after_s: float = NAN  # a refusal's Retry-After, in seconds

    @property
    def ok(self) -> bool:
        return self.status == 200

    @property
    def send_lag_ms(self) -> float:
        return (self.sent_s - self.scheduled_s) * 1000.0

    @property
    def completed_s(self) -> float:
        return self.sent_s + self.latency_ms / 1000.0


@dataclass(frozen=True, slots=True)
class InstanceSample:
    """One poll of /system/instances: instance counts by function and state."""

    t_s: float
    function: str
    state: str
    count: int


RECORD_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(RequestRecord))
INSTANCE_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(InstanceSample))


def _format(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "" if math.isnan(value) else repr(value)
    return str(value)


def write_records_csv(path: Path, records: Iterable[RequestRecord]) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(RECORD_COLUMNS)
        for record in records:
            writer.writerow([_format(getattr(record, name)) for name in RECORD_COLUMNS])


def _float(text: str) -> float:
    return float(text) if text else NAN


def read_records_csv(path: Path) -> list[RequestRecord]:
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        missing = set(RECORD_COLUMNS) - set(reader.fieldnames or ()) - {"retry_after_s"}
        if missing:
            raise ValueError(f"{path}: missing columns {sorted(missing)}")
        return [
            RequestRecord(
                index=int(row["index"]),
                function=row["function"],
                scheduled_s=float(row["scheduled_s"]),
                sent_s=float(row["sent_s"]),
                latency_ms=_float(row["latency_ms"]),
                status=int(row["status"]),
                error=row["error"],
                call_id=row["call_id"],
                instance=row["instance"],
                batch_size=int(row["batch_size"] or 0),
                queue_ms=_float(row["queue_ms"]),
                exec_ms=_float(row["exec_ms"]),
                cold_start=row["cold_start"] == "true",
                cold_start_ms=_float(row["cold_start_ms"]),
                duration_ms=_float(row["duration_ms"]),
                step=int(row["step"] or 0),
                retry_after_s=_float(row.get("retry_after_s") or ""),
            )
            for row in reader
        ]


def write_instances_csv(path: Path, samples: Iterable[InstanceSample]) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(INSTANCE_COLUMNS)
        for sample in samples:
            writer.writerow([_format(getattr(sample, name)) for name in INSTANCE_COLUMNS])

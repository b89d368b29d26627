"""What a reply tells the load generator: record fields from headers, error codes from bodies,
instance counts from `/system/instances`.

Pure: values in, values out; no I/O, no clock.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Mapping
from typing import Any

import msgspec
import orjson

from loadgen.records import NAN, InstanceSample

MSGPACK_TYPES = ("application/msgpack", "application/x-msgpack")


def _header_float(headers: Mapping[str, str], name: str, factor: float = 1.0) -> float:
    value = headers.get(name)
    if value is None:
        return NAN
    try:
        return float(value) * factor
    except ValueError:
        return NAN


def timing_from_headers(headers: Mapping[str, str]) -> dict[str, Any]:
    """The infless timing headers as RequestRecord fields (absent -> NaN/0/"")."""
    try:
        batch_size = int(headers.get("X-Infless-Batch-Size", "0"))
    except ValueError:
        batch_size = 0
    return {
        "call_id": headers.get("X-Call-Id", ""),
        "instance": headers.get("X-Infless-Instance", ""),
        "batch_size": batch_size,
        "queue_ms": _header_float(headers, "X-Infless-Queue-Ms"),
        "exec_ms": _header_float(headers, "X-Infless-Exec-Ms"),
        "cold_start": headers.get("X-Infless-Cold-Start", "").lower() == "true",
        "cold_start_ms": _header_float(headers, "X-Infless-Cold-Start-Ms"),
        "duration_ms": _header_float(headers, "X-Duration-Seconds", 1000.0),
        "retry_after_s": _header_float(headers, "Retry-After"),
    }


def _decode(payload: bytes, content_type: str) -> object:
    if content_type.split(";", maxsplit=1)[0].strip().lower() in MSGPACK_TYPES:
        with contextlib.suppress(msgspec.DecodeError):
            return msgspec.msgpack.decode(payload)
        return None
    with contextlib.suppress(orjson.JSONDecodeError, UnicodeDecodeError):
        return orjson.loads(payload)
    return None


def error_code(status: int, payload: bytes, content_type: str = "") -> str:
    """The gateway's `code` from an error body (JSON, or msgpack when the reply says so),
    else `http_<status>`."""
    body = _decode(payload, content_type)
    if isinstance(body, dict) and isinstance(body.get("code"), str) and body["code"]:
        return str(body["code"])
    return f"http_{status}"


def instance_samples(t_s: float, instances: object) -> list[InstanceSample]:
    counts: Counter[tuple[str, str]] = Counter()
    if isinstance(instances, list):
        for item in instances:
            if isinstance(item, dict):
                counts[(str(item.get("function", "")), str(item.get("state", "")))] += 1
    return [InstanceSample(t_s, fn, state, n) for (fn, state), n in sorted(counts.items())]

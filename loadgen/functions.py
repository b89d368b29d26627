"""What the load generator knows about a gateway: its URL and its deployed functions.

Pure: parses the JSON the gateway returned (`GET /system/function/{name}`) and checks target
URLs; it never opens a connection itself.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

SLO_ANNOTATION = "com.infless.latency_target"
_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(ms|s|us)?\s*$")


class TargetError(ValueError):
    """A gateway URL the load generator refuses to drive."""


@dataclass(frozen=True, slots=True)
class InputSpec:
    """One input of a function's signature; `shape` has no batch dim, -1 = any length.

    `low`/`high` bound integer values when the gateway gave a hint (`vocabSize` or `range`).
    """

    name: str
    dtype: str
    shape: tuple[int, ...]
    low: int | None = None
    high: int | None = None  # exclusive


@dataclass(frozen=True, slots=True)
class FunctionInfo:
    name: str
    slo_ms: float | None
    max_batch: int | None
    inputs: tuple[InputSpec, ...]
    output_names: tuple[str, ...] = ()  # the signature's outputs (V2 asks for them by name)


def check_target(url: str, allow_remote: bool) -> str:
    """The gateway base URL without a trailing slash; loopback only unless `allow_remote`.

    Hostnames are not resolved: only `localhost` and literal loopback addresses count as
    loopback, so a name that resolves elsewhere cannot slip through.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise TargetError(f"gateway URL {url!r}: scheme must be http or https")
    host = parts.hostname
    if not host:
        raise TargetError(f"gateway URL {url!r}: no host (try http://127.0.0.1:8080)")
    if parts.query or parts.fragment:
        raise TargetError(f"gateway URL {url!r}: remove the query/fragment")
    if not allow_remote and not is_loopback_host(host):
        raise TargetError(
            f"gateway URL {url!r}: host {host!r} is not loopback; "
            "pass --allow-remote to drive another machine"
        )
    return url.rstrip("/")


def is_loopback_host(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_duration_ms(text: str) -> float | None:
    """'50ms' -> 50.0, '0.2s' -> 200.0, '75' -> 75.0 (ms), '' or junk -> None."""
    match = _DURATION.match(text)
    if match is None:
        return None
    value = float(match.group(1))
    unit = match.group(2) or "ms"
    return {"ms": value, "s": value * 1000.0, "us": value / 1000.0}[unit]


def _int_hint(value: object) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def parse_input_spec(raw: dict[str, Any], function: str) -> InputSpec:
    try:
        name = str(raw["name"])
        dtype = str(raw["dtype"])
        shape = tuple(int(d) for d in raw.get("shape", []))
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(
            f"function {function!r}: signature input {raw!r} needs name, dtype and an int "
            f"shape ({exc})"
        ) from None
    low: int | None = None
    high: int | None = None
    vocab = _int_hint(raw.get("vocabSize", raw.get("vocab_size")))
    if vocab is not None and vocab > 0:
        low, high = 0, vocab
    value_range = raw.get("range")
    if isinstance(value_range, list) and len(value_range) == 2:
        lo, hi = _int_hint(value_range[0]), _int_hint(value_range[1])
        if lo is not None and hi is not None and hi >= lo:
            low, high = lo, hi + 1  # the hint is inclusive
    return InputSpec(name=name, dtype=dtype, shape=shape, low=low, high=high)


def parse_function_status(raw: dict[str, Any]) -> FunctionInfo:
    """An OpenFaaS FunctionStatus with the infless fields (`latencyTargetMs`, `maxBatch`,
    `signature`). The SLO falls back to the `com.infless.latency_target` annotation."""
    name = str(raw.get("name", ""))
    if not name:
        raise ValueError(f"function status without a name: {raw!r}")
    slo_ms: float | None = None
    target = raw.get("latencyTargetMs")
    if isinstance(target, int | float) and not isinstance(target, bool) and target > 0:
        slo_ms = float(target)
    else:
        annotations = raw.get("annotations") or {}
        if isinstance(annotations, dict) and SLO_ANNOTATION in annotations:
            slo_ms = parse_duration_ms(str(annotations[SLO_ANNOTATION]))
    max_batch = _int_hint(raw.get("maxBatch"))
    signature = raw.get("signature") or {}
    raw_inputs = signature.get("inputs", []) if isinstance(signature, dict) else []
    inputs = tuple(parse_input_spec(i, name) for i in raw_inputs if isinstance(i, dict))
    raw_outputs = signature.get("outputs", []) if isinstance(signature, dict) else []
    outputs = tuple(str(o["name"]) for o in raw_outputs if isinstance(o, dict) and o.get("name"))
    return FunctionInfo(
        name=name, slo_ms=slo_ms, max_batch=max_batch, inputs=inputs, output_names=outputs
    )

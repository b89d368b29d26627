"""Typed status views of the data plane: frozen records the gateway renders to JSON.

Each view is a msgspec struct with snake_case fields; its JSON keys are their camelCase
(`rename="camel"`), the same keys clients and the live board read. The data plane builds
them; only the gateway encodes them (`msgspec.json.encode`, `msgspec.to_builtins`).
"""

from __future__ import annotations

import msgspec


class AdmissionView(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """How requests of one function are admitted now (`/system/function`'s `admission`).

    `capacity_rps` is what its ready instances serve at most at the service times they
    measured recently (`capacity_by_instance`: each one's part). `budget_ms` is how long a
    request arriving now may take to be served; `budget_factor`, `overhead_ms` and
    `loop_lag_ms` are what shape it. `p99_ms` is the answered latency at its tail (None:
    nothing measured yet); `refused` counts the requests refused for lack of capacity.
    """

    capacity_rps: float
    capacity_by_instance: dict[str, float]
    budget_ms: float
    budget_factor: float
    overhead_ms: float
    loop_lag_ms: float
    p99_ms: float | None
    refused: int

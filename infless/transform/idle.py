"""Which idle workers to keep (the idle-instance rule) and which a function may take.
Pure: no I/O, no clock."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class IdleEntry:
    worker_id: str
    function: str
    tenant: str
    parked_s: float


def may_keep(
    parked: Sequence[IdleEntry], function: str, *, per_function: int, max_idle: int
) -> bool:
    """Whether one more idle worker of `function` may be kept."""
    if len(parked) >= max_idle:
        return False
    return sum(1 for e in parked if e.function == function) < per_function


def donors_for(
    parked: Sequence[IdleEntry], tenant: str, compatible: Mapping[str, bool] | None = None
) -> list[IdleEntry]:
    """The idle workers a function of `tenant` may take (never another tenant's: isolation
    is never crossed), newest first; `compatible` (worker id -> bool) filters further."""
    found = [e for e in parked if e.tenant == tenant and (compatible or {}).get(e.worker_id, True)]
    return sorted(found, key=lambda e: e.parked_s, reverse=True)

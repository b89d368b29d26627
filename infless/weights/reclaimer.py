"""Which stored tensors to free (Tetris §3.4), and the async shell that asks on a schedule.

`reclaim_decision` is pure: entries, the live set and `now` in, the entries to free out. A
tensor in the live set is never freed; an unreferenced tensor is freed once it has been
unused for the keep-alive window, and, while the store is over capacity, unreferenced
tensors are freed least recently used first. The live set is derived by the store from the
running instances the shell passes in (as Tetris asks the orchestrator which functions run),
so a worker that died without releasing its tensors leaks nothing. `tenant_bytes` and
`store_usage` (pure too) say what a store holds, for `/system/servers` and the live board.

The shell (`Reclaimer`) owns no state beyond its task; it never reads time except through
the injected clock and never touches files itself: the store applies each decision.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Protocol

from infless.clock import Clock, Ticker

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TensorEntry:
    """One file of the store: its tenant, content key, size and when it was last used."""

    tenant: str
    key: str
    size_bytes: int
    last_used_s: float

    @property
    def ref(self) -> tuple[str, str]:
        return (self.tenant, self.key)


def tenant_bytes(entries: Iterable[TensorEntry]) -> dict[str, int]:
    """The bytes a store holds per tenant."""
    tenants: dict[str, int] = {}
    for entry in entries:
        tenants[entry.tenant] = tenants.get(entry.tenant, 0) + entry.size_bytes
    return tenants


def store_usage(entries: Collection[TensorEntry]) -> dict[str, object]:
    """What a store holds: bytes and tensors in all, and bytes per tenant (what
    `/system/servers` and the live board show)."""
    tenants = tenant_bytes(entries)
    return {"bytes": sum(tenants.values()), "tensors": len(entries), "tenantBytes": tenants}


def reclaim_decision(
    entries: Iterable[TensorEntry],
    live_set: Collection[tuple[str, str]],
    now: float,
    keepalive_s: float,
    capacity_bytes: int | None,
) -> list[TensorEntry]:
    """The entries to free, expired ones first, then LRU ones while over capacity.

    `live_set` holds the (tenant, key) refs that some running instance maps; those are never
    returned, even when the store stays over capacity because of them.
    """
    if keepalive_s < 0:
        raise ValueError(f"keepalive_s must be >= 0 seconds, got {keepalive_s}")
    if capacity_bytes is not None and capacity_bytes < 0:
        raise ValueError(f"capacity_bytes must be >= 0 or None, got {capacity_bytes}")
    all_entries = list(entries)
    unreferenced = [e for e in all_entries if e.ref not in live_set]
    expired = [e for e in unreferenced if now - e.last_used_s >= keepalive_s]
    to_free = sorted(expired, key=lambda e: (e.last_used_s, e.tenant, e.key))
    if capacity_bytes is None:
        return to_free
    freed = {e.ref for e in to_free}
    remaining_bytes = sum(e.size_bytes for e in all_entries if e.ref not in freed)
    candidates = sorted(
        (e for e in unreferenced if e.ref not in freed),
        key=lambda e: (e.last_used_s, e.tenant, e.key),
    )
    for entry in candidates:
        if remaining_bytes <= capacity_bytes:
            break
        to_free.append(entry)
        remaining_bytes -= entry.size_bytes
    return to_free


class Reclaimable(Protocol):
    """What the shell needs from a store: apply one decision for these running instances."""

    def reclaim(self, running: Iterable[str], now: float) -> list[TensorEntry]: ...


class Reclaimer:
    """Ticks every `interval_s` on the injected clock and asks the store to reclaim.

    `running` must return every instance the pool has (starting, ready or draining): an
    instance missing from it loses its holds, and its tensors become reclaimable.
    The store call is synchronous on the loop; unlinking tmpfs files is cheap.
    """

    def __init__(
        self,
        store: Reclaimable,
        clock: Clock,
        running: Callable[[], Iterable[str]],
        interval_s: float = 5.0,
        on_freed: Callable[[list[TensorEntry]], None] | None = None,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0 seconds, got {interval_s}")
        self._store = store
        self._clock = clock
        self._running = running
        self._on_freed = on_freed
        self._ticker = Ticker(clock, interval_s, self.tick, "reclaimer")
        self.ticks = 0
        self.freed_bytes = 0

    def tick(self) -> list[TensorEntry]:
        """One reclaim pass now; errors are logged, never raised (the next tick retries)."""
        try:
            freed = self._store.reclaim(self._running(), self._clock.now())
        except Exception:
            log.exception("tensor store reclaim failed; retrying on the next tick")
            freed = []
        self.ticks += 1
        self.freed_bytes += sum(e.size_bytes for e in freed)
        if freed and self._on_freed is not None:
            self._on_freed(freed)
        return freed

    def start(self) -> None:
        self._ticker.start()

    async def stop(self) -> None:
        await self._ticker.stop()

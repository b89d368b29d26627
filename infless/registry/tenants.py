"""Tenants' user and group ids, in SQLite (the same file as the function registry, a table of
its own): allocated once from `[isolation] uid_range`, then the same on every restart.

`TenantRegistry.identity(tenant)` returns the tenant's ids. The first time a tenant is met
it allocates the next free one in one transaction (`tenancy.ids.next_free_id`, skipping ids
of host accounts and groups). A uid is never given to a second tenant. A tenant removed
from every function keeps its ids: its store files and secrets were owned by them. A tenant
recorded outside a later, narrower range keeps its ids too.

Calls take microseconds, from the event loop or the store's threads (one lock); nothing
here runs on the request path.
Shell side: SQLite and the host's account database; never imports torch.
"""

from __future__ import annotations

import grp
import pwd
import threading
from dataclasses import dataclass
from pathlib import Path

from infless.registry.database import open_database, recorded
from infless.tenancy.config import UidRange
from infless.tenancy.ids import next_free_id

_SCHEMA = """CREATE TABLE IF NOT EXISTS tenants (
    tenant TEXT PRIMARY KEY,
    uid INTEGER NOT NULL UNIQUE,
    gid INTEGER NOT NULL
)"""


@dataclass(frozen=True, slots=True)
class TenantIdentity:
    tenant: str
    uid: int
    gid: int


def host_uses(uid: int) -> bool:
    """Whether the host's account database names `uid` as a user or a group."""
    for lookup in (pwd.getpwuid, grp.getgrgid):
        try:
            lookup(uid)
        except KeyError:
            continue
        return True
    return False


class TenantRegistry:
    def __init__(self, path: Path, ids: UidRange) -> None:
        self.path = path
        self.ids = ids
        # checked at open (a damaged file, a held lock or a full disk: StateError, as the
        # function registry's); the store asks from its publishing threads too: one
        # connection behind a lock
        self._db = open_database(path, [_SCHEMA], check_same_thread=False)
        self._lock = threading.Lock()
        self._known: dict[str, TenantIdentity] = {}

    def identity(self, tenant: str) -> TenantIdentity:
        """The tenant's ids, allocated (and recorded) the first time it is asked for."""
        with self._lock:
            known = self._known.get(tenant)
            if known is None:
                with recorded(self.path, f"tenant {tenant!r} got no user id"):
                    known = self._known[tenant] = self._allocate(tenant)
            return known

    def _allocate(self, tenant: str) -> TenantIdentity:
        self._db.execute("BEGIN IMMEDIATE")  # one writer: no two tenants get one id
        try:
            row = self._db.execute(
                "SELECT uid, gid FROM tenants WHERE tenant = ?", (tenant,)
            ).fetchone()
            if row is None:
                held = {uid for (uid,) in self._db.execute("SELECT uid FROM tenants")}
                uid = next_free_id(self.ids, held, host_uses)
                row = (uid, uid)
                self._db.execute(
                    "INSERT INTO tenants(tenant, uid, gid) VALUES (?, ?, ?)", (tenant, *row)
                )
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        return TenantIdentity(tenant, int(row[0]), int(row[1]))

    def all(self) -> list[TenantIdentity]:
        with self._lock:
            rows = self._db.execute("SELECT tenant, uid, gid FROM tenants ORDER BY uid").fetchall()
        return [TenantIdentity(t, int(u), int(g)) for t, u, g in rows]

    def close(self) -> None:
        with self._lock:
            self._db.close()

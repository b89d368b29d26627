"""FunctionRegistry: deployed functions persisted in one SQLite file in the state directory.

One row per function holding its spec as JSON; every write is a committed transaction, so
a gateway restart (or a crash) finds exactly what was deployed. Calls take microseconds and
are made from the event loop; nothing here runs on the request path. Opening checks the
file and keeps a restore point (`registry.database`); a write that cannot be recorded (a
lock held elsewhere, a full disk, a damaged file) raises an error that says so, and
changes nothing.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from infless.registry.database import keep_backup, open_database, recorded
from infless.types import FunctionSpec

_SCHEMA = """
CREATE TABLE IF NOT EXISTS functions (
    name TEXT PRIMARY KEY,
    spec TEXT NOT NULL
)
"""


class FunctionRegistry:
    def __init__(self, path: Path, *, backup: bool = True) -> None:
        self.path = path
        self._db = open_database(path, [_SCHEMA])
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._backups = backup  # a restore point at open and at close (docs/operations.md)
        self.backup = keep_backup(self._db, path) if backup else None

    def put(self, spec: FunctionSpec) -> None:
        with recorded(self.path, f"the deployment of {spec.name!r} was not recorded"):
            self._db.execute(
                "INSERT INTO functions(name, spec) VALUES (?, ?) "
                "ON CONFLICT(name) DO UPDATE SET spec = excluded.spec",
                (spec.name, msgspec.json.encode(spec).decode()),
            )

    def delete(self, name: str) -> bool:
        with recorded(self.path, f"the removal of {name!r} was not recorded"):
            cursor = self._db.execute("DELETE FROM functions WHERE name = ?", (name,))
        return cursor.rowcount > 0

    def get(self, name: str) -> FunctionSpec | None:
        with recorded(self.path, f"function {name!r} could not be read"):
            row = self._db.execute("SELECT spec FROM functions WHERE name = ?", (name,)).fetchone()
        return None if row is None else msgspec.json.decode(row[0], type=FunctionSpec)

    def all(self) -> list[FunctionSpec]:
        with recorded(self.path, "the deployed functions could not be read"):
            rows = self._db.execute("SELECT spec FROM functions ORDER BY name").fetchall()
        return [msgspec.json.decode(row[0], type=FunctionSpec) for row in rows]

    def close(self) -> None:
        """Keep a fresh restore point (a sound file only), then close."""
        if self._backups:
            keep_backup(self._db, self.path)
        self._db.close()

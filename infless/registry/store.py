"""FunctionRegistry: deployed functions persisted in one SQLite file in the state directory.

One row per function holding its spec as JSON; every write is a committed transaction, so
a gateway restart (or a crash) finds exactly what was deployed. Calls take microseconds and
are made from the event loop; nothing here runs on the request path.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import msgspec

from infless.types import FunctionSpec

_SCHEMA = """
CREATE TABLE IF NOT EXISTS functions (
    name TEXT PRIMARY KEY,
    spec TEXT NOT NULL
)
"""


class FunctionRegistry:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._db = sqlite3.connect(path, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(_SCHEMA)

    def put(self, spec: FunctionSpec) -> None:
        self._db.execute(
            "INSERT INTO functions(name, spec) VALUES (?, ?) "
            "ON CONFLICT(name) DO UPDATE SET spec = excluded.spec",
            (spec.name, msgspec.json.encode(spec).decode()),
        )

    def delete(self, name: str) -> bool:
        cursor = self._db.execute("DELETE FROM functions WHERE name = ?", (name,))
        return cursor.rowcount > 0

    def get(self, name: str) -> FunctionSpec | None:
        row = self._db.execute("SELECT spec FROM functions WHERE name = ?", (name,)).fetchone()
        return None if row is None else msgspec.json.decode(row[0], type=FunctionSpec)

    def all(self) -> list[FunctionSpec]:
        rows = self._db.execute("SELECT spec FROM functions ORDER BY name").fetchall()
        return [msgspec.json.decode(row[0], type=FunctionSpec) for row in rows]

    def close(self) -> None:
        self._db.close()

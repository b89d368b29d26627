"""The model-less metadata store: registered models, their variants' profiles and their
applications' goals, in SQLite (the same file as the function registry, tables of its own).

INFaaS keeps the same facts in Redis (`add_model`: accuracy, load latency, inference
latency, peak memory, ...); here each is one JSON row, written in one transaction, read at
registration, at restart and by `GET /system/variants/{model}`. Nothing here runs on the
request path (the catalogue in memory serves that).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Literal

import msgspec

from infless.modelless.profiles import Goals, VariantProfile
from infless.registry.database import open_database, recorded

RegistrationStatus = Literal["generating", "ready", "failed"]

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS modelless_models (
        model TEXT PRIMARY KEY, spec TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS modelless_variants (
        model TEXT NOT NULL, variant TEXT NOT NULL, profile TEXT NOT NULL,
        PRIMARY KEY (model, variant))""",
    """CREATE TABLE IF NOT EXISTS modelless_apps (
        model TEXT NOT NULL, app_id TEXT NOT NULL, goals TEXT NOT NULL,
        PRIMARY KEY (model, app_id))""",
)


class RegisteredModel(msgspec.Struct, frozen=True):
    model: str
    image: str  # the fp32 package it was registered from (zoo name, path or package digest)
    slo_ms: float
    max_batch: int
    metric: str = ""
    status: RegistrationStatus = "generating"
    error: str = ""
    registered_at: str = ""
    generation_s: float | None = None  # how long generating and profiling took


class VariantStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._db = open_database(path, _SCHEMA)  # checked; a held lock fails fast

    def put_model(self, model: RegisteredModel) -> None:
        with recorded(self.path, f"the registration of {model.model!r} was not recorded"):
            self._db.execute(
                "INSERT INTO modelless_models(model, spec) VALUES (?, ?) "
                "ON CONFLICT(model) DO UPDATE SET spec = excluded.spec",
                (model.model, msgspec.json.encode(model).decode()),
            )

    def model(self, name: str) -> RegisteredModel | None:
        row = self._db.execute(
            "SELECT spec FROM modelless_models WHERE model = ?", (name,)
        ).fetchone()
        return None if row is None else msgspec.json.decode(row[0], type=RegisteredModel)

    def models(self) -> list[RegisteredModel]:
        rows = self._db.execute("SELECT spec FROM modelless_models ORDER BY model").fetchall()
        return [msgspec.json.decode(r[0], type=RegisteredModel) for r in rows]

    def put_variants(self, model: str, profiles: list[VariantProfile]) -> None:
        """Replace the model's variants with `profiles`, in one transaction."""
        failed = f"the variants of {model!r} were not recorded"
        with recorded(self.path, failed), self._transaction():
            self._db.execute("DELETE FROM modelless_variants WHERE model = ?", (model,))
            self._db.executemany(
                "INSERT INTO modelless_variants(model, variant, profile) VALUES (?, ?, ?)",
                [(model, p.name, msgspec.json.encode(p).decode()) for p in profiles],
            )

    def variants(self, model: str) -> list[VariantProfile]:
        rows = self._db.execute(
            "SELECT profile FROM modelless_variants WHERE model = ? ORDER BY rowid", (model,)
        ).fetchall()
        return [msgspec.json.decode(r[0], type=VariantProfile) for r in rows]

    def put_app(self, model: str, app_id: str, goals: Goals) -> None:
        with recorded(self.path, f"the goals of {model!r} for {app_id!r} were not recorded"):
            self._db.execute(
                "INSERT INTO modelless_apps(model, app_id, goals) VALUES (?, ?, ?) "
                "ON CONFLICT(model, app_id) DO UPDATE SET goals = excluded.goals",
                (model, app_id, msgspec.json.encode(goals).decode()),
            )

    def apps(self, model: str) -> dict[str, Goals]:
        rows = self._db.execute(
            "SELECT app_id, goals FROM modelless_apps WHERE model = ? ORDER BY app_id", (model,)
        ).fetchall()
        return {r[0]: msgspec.json.decode(r[1], type=Goals) for r in rows}

    def delete_model(self, model: str) -> bool:
        with recorded(self.path, f"the removal of {model!r} was not recorded"), self._transaction():
            found = self._db.execute("DELETE FROM modelless_models WHERE model = ?", (model,))
            self._db.execute("DELETE FROM modelless_variants WHERE model = ?", (model,))
            self._db.execute("DELETE FROM modelless_apps WHERE model = ?", (model,))
        return found.rowcount > 0

    def close(self) -> None:
        self._db.close()

    def _transaction(self) -> _Transaction:
        return _Transaction(self._db)


class _Transaction:
    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN")

    def __exit__(self, kind: object, *_: object) -> None:
        try:
            if kind is None:
                self._db.execute("COMMIT")
        finally:  # a failed COMMIT (a full disk) may leave the transaction open
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")

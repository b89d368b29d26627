"""The operator profile database: SQLite, one file per server (default `state/profiles.sqlite`).

Tables:
  operators(op_key, kind, signature_json, input_elems)   -- the operators ever profiled
  profiles(op_key, batch, cpus, gpu_pct, time_ms, ...)    -- INFless's 5-tuple <p, b, c, g, t>,
                                                             p being the operator (its signature);
                                                             time_ms with its weights in the LLC,
                                                             cold_ms with them in DRAM, ref_ms the
                                                             reference kernel's time (same cpus)
                                                             paired with it (the machine speed
                                                             index, 0: unknown)
  calibration(name, value, measured_at)                   -- per-call overheads, in microseconds
  metaop_costs(meta_op, kind, fixed_us, per_item_us, ...) -- Optimus meta-operator costs per
                                                             operation type (transform.profile)
  gpu_latency(device_name, model_key, batch_size, gpu_pct, -- a whole model measured on a GPU
              cpus, exec_ms, measured_at)                   at a share (`profiler.gpu_profile`),
                                                             device_name as NVML reports it
  meta(key, value)                                        -- schema version, reference kernel

Owns storage only: it never measures and never imports torch. Writes commit per operator, so
an interrupted profiling run resumes where it stopped.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from dataclasses import astuple, dataclass
from pathlib import Path

from infless.profiler.graph import OpSignature

# 3: times on the calling thread's CPU clock; 4: + profiles.ref_ms; 5: stride-1 1x1
# convolutions run on oneDNN at every batch (`infless.models.kernels`); 6: + gpu_latency
SCHEMA_VERSION = "6"
_GPU_LATENCY = """
CREATE TABLE IF NOT EXISTS gpu_latency (
    device_name TEXT NOT NULL,
    model_key TEXT NOT NULL,
    batch_size INTEGER NOT NULL,
    gpu_pct INTEGER NOT NULL,
    cpus INTEGER NOT NULL,
    exec_ms REAL NOT NULL,
    measured_at REAL NOT NULL,
    PRIMARY KEY (device_name, model_key, batch_size, gpu_pct, cpus)
)"""
MIGRATIONS = {  # from version: statements that bring it to the next one
    "3": ["ALTER TABLE profiles ADD COLUMN ref_ms REAL NOT NULL DEFAULT 0"],
    # measured on PyTorch's native kernel (one thread below batch 16, one small sample):
    # profiled again
    "4": [
        """DELETE FROM profiles WHERE op_key IN (
            SELECT op_key FROM operators
            WHERE json_extract(signature_json, '$.target') = 'module:torch.nn.modules.conv.Conv2d'
            AND json_extract(signature_json, '$.params') ->> '$.init.kernel_size.tuple' = '[1,1]'
            AND json_extract(signature_json, '$.params') ->> '$.init.stride.tuple' = '[1,1]'
            AND json_extract(signature_json, '$.params') ->> '$.init.dilation.tuple' = '[1,1]')"""
    ],
    "5": [_GPU_LATENCY],  # GPU profiles of whole models: a new table, nothing else changes
}
_SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS operators (
    op_key TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    signature_json TEXT NOT NULL,
    input_elems INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS profiles (
    op_key TEXT NOT NULL REFERENCES operators(op_key),
    batch INTEGER NOT NULL,
    cpus INTEGER NOT NULL,
    gpu_pct INTEGER NOT NULL DEFAULT 0,
    time_ms REAL NOT NULL,
    min_ms REAL NOT NULL,
    spread REAL NOT NULL,
    reps INTEGER NOT NULL,
    measured_at REAL NOT NULL,
    cold_ms REAL NOT NULL,
    ref_ms REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (op_key, batch, cpus, gpu_pct)
);
CREATE TABLE IF NOT EXISTS calibration (
    name TEXT PRIMARY KEY,
    value REAL NOT NULL,
    measured_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS metaop_costs (
    meta_op TEXT NOT NULL,
    kind TEXT NOT NULL,
    fixed_us REAL NOT NULL,
    per_item_us REAL NOT NULL,
    per_mib_us REAL NOT NULL,
    samples INTEGER NOT NULL,
    measured_at REAL NOT NULL,
    PRIMARY KEY (meta_op, kind)
);
"""
    + _GPU_LATENCY
    + ";\n"
)
_META = "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"


@dataclass(frozen=True, slots=True)
class ProfileRow:
    """One measured point: operator `op_key` at <batch, cpus, gpu_pct> took `time_ms`."""

    op_key: str
    batch: int
    cpus: int
    gpu_pct: int
    time_ms: float
    min_ms: float = 0.0
    spread: float = 0.0
    reps: int = 0
    measured_at: float = 0.0
    cold_ms: float = 0.0  # weights out of the last-level cache too (0: same as time_ms)
    ref_ms: float = 0.0  # the reference kernel (same cpus) paired with it (0: not measured)

    @property
    def cold_or_warm_ms(self) -> float:
        return self.cold_ms if self.cold_ms > 0 else self.time_ms


Config = tuple[int, int, int]  # (batch, cpus, gpu_pct)


@dataclass(frozen=True, slots=True)
class GpuLatencyRow:
    """A whole model measured on a GPU: `model_key` at `batch_size` on `gpu_pct` % of a
    `device_name` device (NVML's name: an H100's profile does not price an A10), its host
    side on `cpus` cores, took `exec_ms` (the median of the timed rounds)."""

    device_name: str
    model_key: str
    batch_size: int
    gpu_pct: int
    cpus: int
    exec_ms: float
    measured_at: float = 0.0


class ProfileDatabase:
    """A handle on one profile database file; use as a context manager or call `close()`."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        if str(path) != ":memory:":
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(str(path), timeout=30.0)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute(_META)
        version = self.get_meta("schema_version")
        while version in MIGRATIONS:  # an older database: upgrade it in place, in one commit
            for statement in MIGRATIONS[version]:
                self._conn.execute(statement)
            version = str(int(version) + 1)
            self._conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (version,))
        self._conn.commit()
        if version is not None and version != SCHEMA_VERSION:
            self._conn.close()
            raise ValueError(
                f"{self.path}: profile database schema {version!r}, this infless reads "
                f"{SCHEMA_VERSION!r} (and upgrades {', '.join(sorted(MIGRATIONS))}); move the "
                "file away and profile again"
            )
        self._conn.executescript(_SCHEMA)
        self._conn.execute(
            "INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', ?)", (SCHEMA_VERSION,)
        )
        self._conn.commit()

    def __enter__(self) -> ProfileDatabase:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._conn.close()

    def get_meta(self, key: str) -> str | None:
        row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str) -> None:
        self._conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, value))
        self._conn.commit()

    def add_operator(self, signature: OpSignature) -> None:
        elems = sum(t.numel_per_sample() for t in signature.inputs if t.batch_axis is not None)
        self._conn.execute(
            "INSERT OR IGNORE INTO operators(op_key, kind, signature_json, input_elems) "
            "VALUES (?, ?, ?, ?)",
            (signature.key, signature.kind, json.dumps(signature.to_json()), elems),
        )

    def add_profiles(self, signature: OpSignature, rows: Iterable[ProfileRow]) -> None:
        """Store `rows` (all of `signature`) and commit: the unit a resumed run skips."""
        self.add_operator(signature)
        self._conn.executemany(
            "INSERT OR REPLACE INTO profiles(op_key, batch, cpus, gpu_pct, time_ms, min_ms, "
            "spread, reps, measured_at, cold_ms, ref_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    r.op_key,
                    r.batch,
                    r.cpus,
                    r.gpu_pct,
                    r.time_ms,
                    r.min_ms,
                    r.spread,
                    r.reps,
                    r.measured_at,
                    r.cold_ms,
                    r.ref_ms,
                )
                for r in rows
            ],
        )
        self._conn.commit()

    def measured_configs(self, op_key: str) -> set[Config]:
        rows = self._conn.execute(
            "SELECT batch, cpus, gpu_pct FROM profiles WHERE op_key = ?", (op_key,)
        ).fetchall()
        return {(int(b), int(c), int(g)) for b, c, g in rows}

    def rows_for(self, op_keys: Iterable[str]) -> dict[str, list[ProfileRow]]:
        """Every stored row of the given operators (keys with no rows map to [])."""
        result: dict[str, list[ProfileRow]] = {}
        for key in dict.fromkeys(op_keys):
            rows = self._conn.execute(
                "SELECT batch, cpus, gpu_pct, time_ms, min_ms, spread, reps, measured_at, cold_ms, "
                "ref_ms FROM profiles WHERE op_key = ? ORDER BY gpu_pct, cpus, batch",
                (key,),
            ).fetchall()
            result[key] = [ProfileRow(key, *row) for row in rows]
        return result

    def signature(self, op_key: str) -> OpSignature | None:
        row = self._conn.execute(
            "SELECT signature_json FROM operators WHERE op_key = ?", (op_key,)
        ).fetchone()
        return None if row is None else OpSignature.from_json(json.loads(row[0]))

    def speed_points(self) -> list[tuple[int, float]]:
        """(cpus, ref_ms) of every profile row with a speed index (see `speed.typical_index`)."""
        rows = self._conn.execute("SELECT cpus, ref_ms FROM profiles WHERE ref_ms > 0").fetchall()
        return [(int(c), float(ms)) for c, ms in rows]

    def calibration(self) -> dict[str, float]:
        rows = self._conn.execute("SELECT name, value FROM calibration").fetchall()
        return {str(name): float(value) for name, value in rows}

    def set_calibration(self, values: dict[str, float], measured_at: float) -> None:
        self._conn.executemany(
            "INSERT OR REPLACE INTO calibration(name, value, measured_at) VALUES (?, ?, ?)",
            [(name, value, measured_at) for name, value in values.items()],
        )
        self._conn.commit()

    def metaop_costs(self) -> list[tuple[str, str, float, float, float]]:
        """Every profiled meta-operator cost: (meta_op, kind, fixed_us, per_item_us,
        per_mib_us); an item is a tensor (a graph node for Edge)."""
        rows = self._conn.execute(
            "SELECT meta_op, kind, fixed_us, per_item_us, per_mib_us FROM metaop_costs"
        ).fetchall()
        return [(str(m), str(k), float(f), float(i), float(b)) for m, k, f, i, b in rows]

    def set_metaop_costs(
        self, rows: Iterable[tuple[str, str, float, float, float, int]], measured_at: float
    ) -> None:
        self._conn.executemany(
            "INSERT OR REPLACE INTO metaop_costs(meta_op, kind, fixed_us, per_item_us, "
            "per_mib_us, samples, measured_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(*row, measured_at) for row in rows],
        )
        self._conn.commit()

    def add_gpu_latency(self, rows: Iterable[GpuLatencyRow]) -> None:
        """Store measured GPU points (a point measured again replaces the old one) and commit."""
        self._conn.executemany(
            "INSERT OR REPLACE INTO gpu_latency(device_name, model_key, batch_size, gpu_pct, "
            "cpus, exec_ms, measured_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            [astuple(r) for r in rows],  # the fields are in the columns' order
        )
        self._conn.commit()

    def gpu_latency(
        self, device_names: Iterable[str] | None = None, model_keys: Iterable[str] | None = None
    ) -> list[GpuLatencyRow]:
        """The stored GPU points, of the given devices and models only when given."""
        query = (
            "SELECT device_name, model_key, batch_size, gpu_pct, cpus, exec_ms, measured_at "
            "FROM gpu_latency"
        )
        clauses: list[str] = []
        params: list[str] = []
        for column, values in (("device_name", device_names), ("model_key", model_keys)):
            if values is not None:
                wanted = list(dict.fromkeys(values))
                clauses.append(f"{column} IN ({', '.join('?' for _ in wanted)})")
                params.extend(wanted)
        if clauses:
            query += " WHERE " + " AND ".join(clauses)
        query += " ORDER BY device_name, model_key, gpu_pct, batch_size, cpus"
        return [
            GpuLatencyRow(
                device_name=str(d),
                model_key=str(m),
                batch_size=int(b),
                gpu_pct=int(g),
                cpus=int(c),
                exec_ms=float(t),
                measured_at=float(at),
            )
            for d, m, b, g, c, t, at in self._conn.execute(query, params).fetchall()
        ]

    def counts(self) -> tuple[int, int]:
        """(operators, profile rows) stored."""
        ops = self._conn.execute("SELECT COUNT(*) FROM operators").fetchone()[0]
        rows = self._conn.execute("SELECT COUNT(*) FROM profiles").fetchone()[0]
        return int(ops), int(rows)

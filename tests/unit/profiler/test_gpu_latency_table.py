"""The profile database's gpu_latency table: rows, filters, re-measurement and the migration."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from infless.profiler.database import SCHEMA_VERSION, GpuLatencyRow, ProfileDatabase

H100 = "NVIDIA H100 80GB HBM3"
A10 = "NVIDIA A10"


def test_rows_round_trip_in_order(tmp_path: Path) -> None:
    stored = [
        GpuLatencyRow(H100, "resnet-50", 8, 30, 1, 5.5, 1_700_000_000.0),
        GpuLatencyRow(H100, "resnet-50", 1, 30, 1, 4.0, 1_700_000_000.0),
        GpuLatencyRow(A10, "resnet-50", 1, 100, 1, 7.0, 1_700_000_001.0),
    ]
    with ProfileDatabase(tmp_path / "p.sqlite") as db:
        db.add_gpu_latency(stored)
    with ProfileDatabase(tmp_path / "p.sqlite") as db:
        found = db.gpu_latency()
    assert found == [stored[2], stored[1], stored[0]]  # by device, model, share, batch


def test_rows_are_filtered_by_device_and_model(tmp_path: Path) -> None:
    with ProfileDatabase(tmp_path / "p.sqlite") as db:
        db.add_gpu_latency(
            GpuLatencyRow(device, model, 1, 50, 1, 2.0)
            for device in (H100, A10)
            for model in ("a", "b")
        )
        assert {(r.device_name, r.model_key) for r in db.gpu_latency([H100])} == {
            (H100, "a"),
            (H100, "b"),
        }
        assert [(r.device_name, r.model_key) for r in db.gpu_latency([A10], ["b"])] == [(A10, "b")]
        assert db.gpu_latency([H100], []) == []


def test_a_point_measured_again_replaces_the_old_one(tmp_path: Path) -> None:
    with ProfileDatabase(tmp_path / "p.sqlite") as db:
        db.add_gpu_latency([GpuLatencyRow(H100, "m", 4, 30, 1, 9.0, 1.0)])
        db.add_gpu_latency([GpuLatencyRow(H100, "m", 4, 30, 1, 6.0, 2.0)])
        assert db.gpu_latency() == [GpuLatencyRow(H100, "m", 4, 30, 1, 6.0, 2.0)]


def test_a_schema_5_database_gains_the_table_and_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "v5.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        INSERT INTO meta VALUES ('schema_version', '5');
        CREATE TABLE calibration (name TEXT PRIMARY KEY, value REAL NOT NULL,
            measured_at REAL NOT NULL);
        INSERT INTO calibration VALUES ('call_us', 3.5, 1.0);
        """
    )
    conn.commit()
    conn.close()
    with ProfileDatabase(path) as db:
        assert db.get_meta("schema_version") == SCHEMA_VERSION == "6"
        assert db.calibration() == {"call_us": 3.5}
        assert db.gpu_latency() == []
        db.add_gpu_latency([GpuLatencyRow(H100, "m", 1, 100, 1, 2.0)])
    with ProfileDatabase(path) as db:  # upgraded once: opens as current from then on
        assert len(db.gpu_latency()) == 1

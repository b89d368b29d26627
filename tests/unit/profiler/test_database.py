"""The SQLite operator profile database: round trip, upgrades, resumable profiling, speed."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest
from torch import nn

from infless.profiler import profiling
from infless.profiler.database import SCHEMA_VERSION, ProfileDatabase, ProfileRow
from infless.profiler.extract import extract_graph
from infless.profiler.graph import OpSignature, TensorInfo, canonical_params
from infless.profiler.operators import Measurement, ProfilePlan
from infless.profiler.profiling import (
    MAX_COLD_BATCH,
    ProfileProgress,
    profile_row,
    profile_signatures,
)
from infless.profiler.speed import REFERENCE_KERNEL
from infless.profiler.targets import BuiltOperator, build_operator
from infless.types import TensorSpec


def _relu(width: int) -> OpSignature:
    call = {"dict": {"args": {"tuple": [{"t": 0}]}, "kwargs": {"dict": {}}}}
    return OpSignature(
        "relu",
        "function:torch.relu",
        canonical_params({"call": call}),
        (TensorInfo((1, width), "float32", 0),),
    )


TINY = ProfilePlan(batches=(1, 2), threads=(1,), budget_s=0.005, min_reps=3, max_reps=3)


def test_rows_round_trip(tmp_path: Path) -> None:
    sig = _relu(8)
    rows = [
        ProfileRow(
            op_key=sig.key,
            batch=b,
            cpus=c,
            gpu_pct=0,
            time_ms=0.1 * b / c,
            min_ms=0.09,
            spread=0.02,
            reps=5,
            measured_at=1.0,
        )
        for b in (1, 2)
        for c in (1, 2)
    ]
    with ProfileDatabase(tmp_path / "p.sqlite") as db:
        db.add_profiles(sig, rows)
    with ProfileDatabase(tmp_path / "p.sqlite") as db:
        assert db.rows_for([sig.key])[sig.key] == sorted(rows, key=lambda r: (r.cpus, r.batch))
        assert db.measured_configs(sig.key) == {(1, 1, 0), (2, 1, 0), (1, 2, 0), (2, 2, 0)}
        assert db.signature(sig.key) == sig
        assert db.rows_for(["unknown"]) == {"unknown": []}
        assert db.counts() == (1, 4)


def test_profiling_resumes_where_it_stopped(tmp_path: Path) -> None:
    path = tmp_path / "p.sqlite"
    with ProfileDatabase(path) as db:
        first = profile_signatures(db, [_relu(8)], TINY)
        assert first.configs_measured == 2
        assert first.configs_skipped == 0
        assert set(db.calibration()) == {
            "module_call_us",
            "python_op_us",
            "op_switch_us",
            "llc_bytes",
            "llc_effective_bytes",
        }
    lines: list[str] = []
    bigger = ProfilePlan(batches=(1, 2, 4), threads=(1,), budget_s=0.005, min_reps=3, max_reps=3)
    with ProfileDatabase(path) as db:
        again = profile_signatures(
            db, [_relu(8), _relu(16)], bigger, ProfileProgress(log=lines.append)
        )
        # relu(8) only lacks batch 4; relu(16) is new
        assert again.configs_measured == 1 + 3
        assert again.configs_skipped == 2
        assert len(lines) == 2
        assert "[2/2]" in lines[1]
        assert all(
            r.time_ms > 0 and r.reps == 3 for r in db.rows_for([_relu(16).key])[_relu(16).key]
        )


def test_remeasuring_keeps_the_faster_figure(tmp_path: Path) -> None:
    sig = _relu(8)
    slow = [
        ProfileRow(
            op_key=sig.key,
            batch=b,
            cpus=1,
            gpu_pct=0,
            time_ms=1e6,
            min_ms=1e6,
            spread=0.0,
            reps=3,
            measured_at=1.0,
            cold_ms=2e6,
        )
        for b in (1, 2)
    ]
    with ProfileDatabase(tmp_path / "p.sqlite") as db:
        db.add_profiles(sig, slow)
        progress = profile_signatures(db, [sig], TINY, remeasure=True)
        rows = db.rows_for([sig.key])[sig.key]
    assert progress.configs_measured == 2
    assert all(r.time_ms < 1e6 for r in rows)
    assert all(r.cold_or_warm_ms < 2e6 for r in rows)


def test_an_operator_that_cannot_run_is_reported_not_fatal(tmp_path: Path) -> None:
    broken = OpSignature("evil", "function:os.system", canonical_params({"call": {}}), ())
    with ProfileDatabase(tmp_path / "p.sqlite") as db:
        progress = profile_signatures(db, [broken, _relu(4)], TINY)
    assert progress.operators_done == 1
    assert len(progress.failures) == 1
    assert "only torch" in progress.failures[0]


def test_gpu_profiling_is_refused_clearly_without_a_gpu(tmp_path: Path) -> None:
    with ProfileDatabase(tmp_path / "p.sqlite") as db, pytest.raises(ValueError, match="GPU"):
        profile_signatures(db, [_relu(4)], ProfilePlan(gpu_pcts=(0, 50)))


def _v3_database(path: Path) -> None:
    """A schema-3 file as the previous infless wrote it (no speed index column)."""
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE operators (op_key TEXT PRIMARY KEY, kind TEXT NOT NULL,
            signature_json TEXT NOT NULL, input_elems INTEGER NOT NULL);
        CREATE TABLE profiles (op_key TEXT NOT NULL, batch INTEGER NOT NULL,
            cpus INTEGER NOT NULL, gpu_pct INTEGER NOT NULL DEFAULT 0, time_ms REAL NOT NULL,
            min_ms REAL NOT NULL, spread REAL NOT NULL, reps INTEGER NOT NULL,
            measured_at REAL NOT NULL, cold_ms REAL NOT NULL,
            PRIMARY KEY (op_key, batch, cpus, gpu_pct));
        CREATE TABLE calibration (name TEXT PRIMARY KEY, value REAL NOT NULL,
            measured_at REAL NOT NULL);
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        INSERT INTO meta VALUES ('schema_version', '3');
        INSERT INTO profiles VALUES ('k', 1, 1, 0, 2.0, 1.9, 0.01, 5, 1.0, 2.5);
        """
    )
    conn.commit()
    conn.close()


def test_a_schema_3_database_is_upgraded_and_its_rows_carry_no_speed_index(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.sqlite"
    _v3_database(path)
    with ProfileDatabase(path) as db:
        assert db.get_meta("schema_version") == SCHEMA_VERSION
        assert db.rows_for(["k"])["k"] == [
            ProfileRow(
                op_key="k",
                batch=1,
                cpus=1,
                gpu_pct=0,
                time_ms=2.0,
                min_ms=1.9,
                spread=0.01,
                reps=5,
                measured_at=1.0,
                cold_ms=2.5,
            )
        ]
        assert db.speed_points() == []
    with ProfileDatabase(path) as db:  # upgraded once: opens as current from then on
        assert db.get_meta("schema_version") == SCHEMA_VERSION


def test_upgrading_from_schema_4_drops_the_profiles_of_stride_one_pointwise_convolutions(
    tmp_path: Path,
) -> None:
    """They were measured on PyTorch's native kernel; workers now run them on oneDNN."""
    model = nn.Sequential(nn.Conv2d(3, 8, 1), nn.Conv2d(8, 8, 3), nn.Conv2d(8, 8, 1, stride=2))
    graph = extract_graph(model, (TensorSpec("image", "float32", (3, 8, 8)),), model_key="m")
    pointwise, three_by_three, strided = (node.signature for node in graph.nodes)
    path = tmp_path / "v4.sqlite"
    with ProfileDatabase(path) as db:
        for sig in (pointwise, three_by_three, strided, _relu(4)):
            db.add_profiles(sig, [ProfileRow(sig.key, 1, 1, 0, 1.0)])
        db.set_meta("schema_version", "4")
    with ProfileDatabase(path) as db:
        assert db.get_meta("schema_version") == SCHEMA_VERSION
        rows = db.rows_for([pointwise.key, three_by_three.key, strided.key, _relu(4).key])
    assert [len(found) for found in rows.values()] == [0, 1, 1, 1]


def test_an_unknown_schema_is_refused_with_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
        "INSERT INTO meta VALUES ('schema_version', '2');"
    )
    conn.commit()
    conn.close()
    with pytest.raises(ValueError, match=r"schema '2'.*profile again"):
        ProfileDatabase(path)


class _Reference:
    """A stand-in reference kernel: a little arithmetic, counted."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> object:
        self.calls += 1
        return sum(range(2000))


def test_each_row_stores_the_reference_kernel_paired_with_its_measurement(
    tmp_path: Path,
) -> None:
    reference = _Reference()
    with ProfileDatabase(tmp_path / "p.sqlite") as db:
        profile_signatures(db, [_relu(8)], TINY, reference=reference)
        rows = db.rows_for([_relu(8).key])[_relu(8).key]
        assert db.get_meta("reference_kernel") == REFERENCE_KERNEL
    # a warm and a timed call per repetition: 3 repetitions per batch (a noisy batch: twice)
    assert reference.calls >= 2 * 3 * 2
    assert reference.calls % (3 * 2) == 0
    assert len(rows) == 2
    assert all(r.ref_ms > 0 for r in rows)


def test_a_database_indexed_by_another_reference_kernel_is_refused(tmp_path: Path) -> None:
    with ProfileDatabase(tmp_path / "p.sqlite") as db:
        db.set_meta("reference_kernel", "some-other-kernel/v0")
        with pytest.raises(ValueError, match="reference kernel"):
            profile_signatures(db, [_relu(8)], TINY, reference=_Reference())


def test_remeasuring_compares_old_and_new_figures_at_one_machine_speed(tmp_path: Path) -> None:
    sig = _relu(8)
    # the old figure is large only because the machine ran 1e12x slower back then
    slow = [
        ProfileRow(
            op_key=sig.key,
            batch=b,
            cpus=1,
            gpu_pct=0,
            time_ms=1e6,
            min_ms=1e6,
            spread=0.0,
            reps=3,
            measured_at=1.0,
            cold_ms=1e6,
            ref_ms=1e12,
        )
        for b in (1, 2)
    ]
    with ProfileDatabase(tmp_path / "p.sqlite") as db:
        db.add_profiles(sig, slow)
        profile_signatures(db, [sig], TINY, remeasure=True, reference=_Reference())
        rows = db.rows_for([sig.key])[sig.key]
    assert all(r.ref_ms > 0 and r.time_ms == pytest.approx(1e6 * r.ref_ms / 1e12) for r in rows)


def test_a_cold_figure_is_brought_to_the_warm_figures_machine_speed() -> None:
    warm = Measurement(2.0, 2.0, 1.9, 0.01, 5, 2.1, ref_ms=1.0)
    cold = Measurement(6.0, 6.0, 5.5, 0.01, 5, 6.1, ref_ms=2.0)  # measured at half speed
    row = profile_row("k", 4, 2, warm, cold, measured_at=7.0)
    assert row == ProfileRow(
        op_key="k",
        batch=4,
        cpus=2,
        gpu_pct=0,
        time_ms=2.0,
        min_ms=1.9,
        spread=0.01,
        reps=5,
        measured_at=7.0,
        cold_ms=3.0,
        ref_ms=1.0,
    )
    unpaired = profile_row("k", 4, 2, replace(warm, ref_ms=0.0), cold, measured_at=7.0)
    assert (unpaired.cold_ms, unpaired.ref_ms) == (6.0, 0.0)


def test_lookups_are_measured_out_of_the_caches_at_every_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Above MAX_COLD_BATCH only lookups get a cold measurement: they read the rows their ids
    pick, not the whole table, so arithmetic never dwarfs reading them."""
    model = nn.Sequential(nn.Embedding(4096, 64), nn.Flatten(), nn.Linear(512, 256))
    graph = extract_graph(model, (TensorSpec("ids", "int64", (8,)),), model_key="lookup")
    signatures = [n.signature for n in graph.nodes if n.signature.kind != "flatten"]
    rotations: dict[str, list[tuple[int, int]]] = {}
    real = build_operator

    def spy(
        signature: OpSignature, batch: int, *, rotate_bytes: int = 0, rotate_input_bytes: int = 0
    ) -> BuiltOperator:
        rotations.setdefault(signature.kind, []).append((rotate_bytes, rotate_input_bytes))
        return real(
            signature, batch, rotate_bytes=rotate_bytes, rotate_input_bytes=rotate_input_bytes
        )

    monkeypatch.setattr(profiling, "build_operator", spy)
    with ProfileDatabase(tmp_path / "p.sqlite") as db:
        profile_signatures(db, signatures, replace(TINY, batches=(2 * MAX_COLD_BATCH,)))
    warm, cold = profiling.rotation_bytes()
    # the weights out of L2, then (lookups) out of the LLC; the inputs out of L2 in both
    assert rotations == {"embedding": [(warm, warm), (cold, warm)], "linear": [(warm, warm)]}

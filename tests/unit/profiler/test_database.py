"""The SQLite operator profile database: round trip and resumable profiling."""

from __future__ import annotations

from pathlib import Path

import pytest

from infless.profiler.database import ProfileDatabase, ProfileRow
from infless.profiler.graph import OpSignature, TensorInfo, canonical_params
from infless.profiler.operators import ProfilePlan, ProfileProgress, profile_signatures


def _relu(width: int) -> OpSignature:
    call = {"dict": {"args": {"tuple": [{"t": 0}]}, "kwargs": {"dict": {}}}}
    return OpSignature(
        "relu", "function:torch.relu", canonical_params({"call": call}),
        (TensorInfo((1, width), "float32", 0),),
    )  # fmt: skip


TINY = ProfilePlan(batches=(1, 2), threads=(1,), budget_s=0.005, min_reps=3, max_reps=3)


def test_rows_round_trip(tmp_path: Path) -> None:
    sig = _relu(8)
    rows = [
        ProfileRow(sig.key, b, c, 0, 0.1 * b / c, 0.09, 0.02, 5, 1.0)
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
    slow = [ProfileRow(sig.key, b, 1, 0, 1e6, 1e6, 0.0, 3, 1.0, 2e6) for b in (1, 2)]
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

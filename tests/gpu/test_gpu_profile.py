"""On a real GPU: `profile_gpu` measures a small zoo model in child processes, stores the rows,
and the planner's GPU predictor prices shares from them. Skipped without CUDA.

At 100 % it needs only a CUDA build of torch and a GPU; at 30 % it needs an MPS control daemon
already running, whose pipe directory the test reads from INFLESS_TEST_MPS_PIPE_DIR (skipped
when that is not set).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from infless.cluster.gpus import discover_gpus
from infless.models.build import build_package
from infless.profiler.database import ProfileDatabase
from infless.profiler.gpu_profile import profile_gpu
from infless.scaling.profiled import load_planning_predictor

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

MODEL = "resnet-20"
MPS_PIPE_DIR_ENV = "INFLESS_TEST_MPS_PIPE_DIR"
TIMEOUT_S = 240.0  # a fresh process: torch, CUDA context, the model, two batch sizes


def _uuid() -> str | None:
    devices = discover_gpus().devices
    return devices[0].uuid if devices else None


def test_the_whole_gpu_is_profiled_and_priced(tmp_path: Path) -> None:
    package = build_package(MODEL, tmp_path / "models")
    with ProfileDatabase(tmp_path / "profiles.sqlite") as db:
        rows = profile_gpu(
            package, [100], _uuid(), None, db, batch_sizes=(1, 8), rounds=10, timeout_s=TIMEOUT_S
        )
        assert sorted(db.gpu_latency(), key=lambda r: r.batch_size) == sorted(
            rows, key=lambda r: r.batch_size
        )
    assert {(r.model_key, r.batch_size, r.gpu_pct, r.cpus) for r in rows} == {
        (MODEL, 1, 100, 1),
        (MODEL, 8, 100, 1),
    }
    assert all(r.exec_ms > 0 for r in rows)
    device = rows[0].device_name
    devices = discover_gpus().devices
    if devices:
        assert device == devices[0].name  # NVML's name, what the server's inventory says
    predictor = load_planning_predictor(tmp_path, [MODEL], [device])
    assert predictor is not None
    by_batch = {r.batch_size: r.exec_ms for r in rows}
    assert predictor.predict_latency_ms(MODEL, 8, 4, 100) == by_batch[8]  # any core count
    between = predictor.predict_latency_ms(MODEL, 4, 1, 100)
    assert min(by_batch.values()) <= between <= max(by_batch.values())
    with pytest.raises(LookupError, match="measured down to 100 %"):
        predictor.predict_latency_ms(MODEL, 1, 1, 30)


def test_a_share_under_mps_is_profiled_and_priced(tmp_path: Path) -> None:
    pipe_dir = os.environ.get(MPS_PIPE_DIR_ENV)
    if not pipe_dir:
        pytest.skip(f"set {MPS_PIPE_DIR_ENV} to a running MPS control daemon's pipe directory")
    package = build_package(MODEL, tmp_path / "models")
    with ProfileDatabase(tmp_path / "profiles.sqlite") as db:
        rows = profile_gpu(
            package, [30, 100], _uuid(), pipe_dir, db, batch_sizes=(1, 8), rounds=10,
            timeout_s=TIMEOUT_S,
        )  # fmt: skip
    assert {(r.batch_size, r.gpu_pct) for r in rows} == {(1, 30), (8, 30), (1, 100), (8, 100)}
    predictor = load_planning_predictor(tmp_path, [MODEL], [rows[0].device_name])
    assert predictor is not None
    at_30 = {r.batch_size: r.exec_ms for r in rows if r.gpu_pct == 30}
    assert predictor.predict_latency_ms(MODEL, 8, 1, 30) == at_30[8]
    assert predictor.predict_latency_ms(MODEL, 8, 1, 50) > 0  # between 30 and 100: priced

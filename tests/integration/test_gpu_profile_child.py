"""The GPU profiling child as a real process on a machine without CUDA: it answers with a clean
"failed" report saying why, and the runner turns that into an error naming it (the GPU side
itself is tests/gpu/test_gpu_profile.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from infless.profiler.database import ProfileDatabase
from infless.profiler.gpu_profile import (
    GpuProfileFailed,
    child_command,
    child_env,
    profile_gpu,
    run_child,
)
from tests.support.gateway import TEST_MODEL_REPOSITORY

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CUDA-less answer")

PACKAGE = TEST_MODEL_REPOSITORY / "mnist"


def test_without_cuda_the_child_reports_why_and_the_runner_names_it(tmp_path: Path) -> None:
    report = run_child(
        child_command(PACKAGE, [1], 1, "fp32"), child_env(100, None, None, os.environ), 120.0
    )
    assert report.status == "failed"
    assert "CUDA is not available" in report.error
    with ProfileDatabase(tmp_path / "p.sqlite") as db:
        with pytest.raises(GpuProfileFailed, match="100 %: CUDA is not available"):
            profile_gpu(PACKAGE, [100], None, None, db, batch_sizes=[1], rounds=1, log=print)
        assert db.gpu_latency() == []

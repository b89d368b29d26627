"""Real-GPU fixtures (`tests/gpu/`, run by a GPU machine's check; skipped without CUDA): zoo
packages built in this process, a tensor store on tmpfs and a real zygote. The zygote keeps
this process's whole environment (a GPU machine's libraries and carried-in wheels are found
through it), with the repository first on PYTHONPATH."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from infless.clock import RealClock
from infless.models.build import build_package
from infless.weights.store import TensorStore
from infless.workers.zygote import ZygoteLauncher
from tests.support.gateway import REPO_ROOT, TEST_MODEL_REPOSITORY

MODELS_USED = ("mnist", "resnet-20")


@pytest.fixture(scope="session")
def built_models() -> Path:
    """The test model repository with the packages these tests load (built once)."""
    for name in MODELS_USED:
        build_package(name, TEST_MODEL_REPOSITORY)
    return TEST_MODEL_REPOSITORY


@pytest.fixture
def store() -> Iterator[TensorStore]:
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
    directory = Path(tempfile.mkdtemp(prefix="infless-gpu-store-", dir=base))
    tensor_store = TensorStore(directory / "store", RealClock(), keepalive_s=0.0)
    yield tensor_store
    tensor_store.close()
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
async def zygote() -> AsyncIterator[ZygoteLauncher]:
    paths = [str(REPO_ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    launcher = ZygoteLauncher(env={**os.environ, "PYTHONPATH": os.pathsep.join(paths)})
    yield launcher
    await launcher.close()

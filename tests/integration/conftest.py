"""Integration fixtures: zoo packages built once per machine into the test model repository;
a tensor store on tmpfs and a real zygote, per test."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from infless.clock import RealClock
from infless.weights.store import TensorStore
from infless.workers.zygote import ZygoteLauncher
from tests.support.gateway import REPO_ROOT, TEST_MODEL_REPOSITORY

MODELS_USED = ["mnist", "textcnn-69", "resnet-20"]


@pytest.fixture(scope="session", autouse=True)
def built_models() -> None:
    """Build (or find cached) the zoo packages the integration tests deploy."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "infless.cli",
            "models",
            "build",
            *MODELS_USED,
            "--repository",
            str(TEST_MODEL_REPOSITORY),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )


@pytest.fixture
def store() -> Iterator[TensorStore]:
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
    directory = Path(tempfile.mkdtemp(prefix="infless-test-store-", dir=base))
    tensor_store = TensorStore(directory / "store", RealClock(), keepalive_s=0.0)
    yield tensor_store
    tensor_store.close()
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
async def zygote() -> AsyncIterator[ZygoteLauncher]:
    launcher = ZygoteLauncher(env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"})
    yield launcher
    await launcher.close()

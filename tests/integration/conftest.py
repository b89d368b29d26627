"""Integration fixtures: zoo packages built once per machine into the test model repository."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.gateway import TEST_MODEL_REPOSITORY

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

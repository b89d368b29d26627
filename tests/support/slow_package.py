"""A function package whose every batch takes a set time (TinyNet of
`tests/fixtures/userproject`, its forward sleeping first): service times that do not depend
on how fast or loaded the machine is, for tests about admission and deadlines."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from safetensors.torch import save_file

from tests.support.gateway import REPO_ROOT

PROJECT = REPO_ROOT / "tests" / "fixtures" / "userproject"


def slow_package(directory: Path, batch_s: float) -> Path:
    """A TinyNet package at `directory` whose forward sleeps `batch_s` per batch."""
    (directory / "src").mkdir(parents=True)
    shutil.copytree(PROJECT / "tinynet", directory / "src" / "tinynet")
    net = directory / "src" / "tinynet" / "net.py"
    net.write_text(
        net.read_text().replace(
            "        scores: torch.Tensor =",
            f"        import time\n        time.sleep({batch_s!r})\n        scores: torch.Tensor =",
        )
    )
    manifest = {
        "name": directory.name,
        "architecture": "tinynet.net:TinyNet",
        "inputs": [{"name": "features", "dtype": "float32", "shape": [4]}],
        "outputs": [{"name": "scores", "dtype": "float32", "shape": [3]}],
        "weights_file": "weights.safetensors",
    }
    (directory / "manifest.json").write_text(json.dumps(manifest))
    sys.path.insert(0, str(PROJECT))
    try:
        from tinynet.net import TinyNet

        weights = {k: v.contiguous() for k, v in TinyNet().state_dict().items()}
    finally:
        sys.path.remove(str(PROJECT))
    save_file(weights, str(directory / "weights.safetensors"))
    return directory

"""Packages for the hostile-package suite: TinyNet with `tests/fixtures/hostile/attacks.py`
as its handler (every request an attack, every answer what it managed), or with TinyNet's
own handler (the victim's function)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from safetensors.torch import save_file

from tests.support.gateway import REPO_ROOT

PROJECT = REPO_ROOT / "tests" / "fixtures" / "userproject"
ATTACKS = REPO_ROOT / "tests" / "fixtures" / "hostile" / "attacks.py"


def _weights(path: Path) -> None:
    """TinyNet's seeded weights as safetensors (built here: weights are never committed)."""
    sys.path.insert(0, str(PROJECT))
    try:
        from tinynet.net import TinyNet

        save_file({k: v.contiguous() for k, v in TinyNet().state_dict().items()}, str(path))
    finally:
        sys.path.remove(str(PROJECT))


def tinynet_package(directory: Path, *, hostile: bool) -> Path:
    """A TinyNet package at `directory`: JSON requests, answered by the attack handler
    (`hostile`) or by TinyNet's own (`{"features": [4 numbers]}` -> a label)."""
    source = directory / "src"
    source.mkdir(parents=True)
    shutil.copytree(PROJECT / "tinynet", source / "tinynet")
    if hostile:
        shutil.copyfile(ATTACKS, source / "attacks.py")
    manifest = {
        "name": directory.name,
        "architecture": "tinynet.net:TinyNet",
        "inputs": [{"name": "features", "dtype": "float32", "shape": [4]}],
        "outputs": [{"name": "scores", "dtype": "float32", "shape": [3]}],
        "weights_file": "weights.safetensors",
        "handler": "attacks:Handler" if hostile else "tinynet.handler:Handler",
    }
    (directory / "manifest.json").write_text(json.dumps(manifest))
    _weights(directory / "weights.safetensors")
    (directory / "weights.safetensors").chmod(0o644)  # safetensors writes 0600
    return directory

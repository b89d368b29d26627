"""Packages of `tests/support/fnenv_model.py` for the worker-runtime integration tests."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from infless.models.package import (
    MANIFEST_FILE,
    SOURCE_DIR,
    WEIGHTS_FILE,
    PackageManifest,
    TensorSignature,
    encode_manifest,
)

MODEL_SOURCE = Path(__file__).with_name("fnenv_model.py")


def probe_package(directory: Path, module_dir: Path, **arch_kwargs: str) -> Path:
    """A package of `fnenv_model:probe(**arch_kwargs)` at `directory`, the model's module in
    its `src/` (a sandboxed worker imports nothing from the gateway's working directory) and
    in `module_dir`."""
    shutil.copyfile(MODEL_SOURCE, module_dir / "fnenv_model.py")
    (directory / SOURCE_DIR).mkdir(parents=True, exist_ok=True)
    shutil.copyfile(MODEL_SOURCE, directory / SOURCE_DIR / "fnenv_model.py")
    manifest = PackageManifest(
        name=directory.name,
        architecture="fnenv_model:probe",
        arch_kwargs=dict(arch_kwargs),
        inputs=[TensorSignature("x", "float32", [4])],
        outputs=[TensorSignature("y", "float32", [3])],
    )
    (directory / MANIFEST_FILE).write_bytes(encode_manifest(manifest))
    save_file({"scale": np.ones(1, dtype=np.float32)}, str(directory / WEIGHTS_FILE))
    return directory

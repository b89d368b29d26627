"""Building zoo function packages into a model repository: seeded, atomic, cached, locked.

`build_package(name, repository)` writes `<repository>/<name>/` (manifest + safetensors) with
the zoo model's seeded weights. A package is written in a temporary directory and renamed
into place, under an exclusive `fcntl.flock` on `<repository>/.<name>.lock`, so concurrent
builders produce one valid package and readers never see a half-written one. A second call
finds the package current (manifest matches the zoo entry, weights file has the recorded
size) and writes nothing.

Torch is imported only when a package is actually built or measured, so `ensure_package`
on an already-built package is torch-free (the gateway may call it). Must not read the
environment (the CLI resolves the repository) and must not load packages for serving.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from infless.clock import perf_s
from infless.errors import UnknownModel
from infless.models.package import (
    MANIFEST_FILE,
    WEIGHTS_FILE,
    encode_manifest,
    is_zoo_name,
    load_manifest,
    package_dir_for,
)
from infless.models.validate import package_is_current, validate_package
from infless.models.zoo import ZOO, ZooEntry, zoo_entry

if TYPE_CHECKING:
    from torch import nn


@dataclass(frozen=True, slots=True)
class BuildResult:
    name: str
    path: Path
    built: bool  # False: a current package was already there and nothing was written
    parameters: int
    weights_bytes: int  # size of the safetensors file
    elapsed_s: float


def build_seeded_module(entry: ZooEntry) -> nn.Module:
    """The zoo model on CPU with its seeded weights, in eval mode."""
    from infless.models.loader import build_module
    from infless.models.zoo.seeding import seed_weights

    module = build_module(entry.manifest(), device="cpu")
    seed_weights(module, entry.seed_for, entry.inputs, calibration_seed=entry.seed)
    return module


def build_meta_module(entry: ZooEntry) -> nn.Module:
    """The zoo model's structure on the meta device (no storage): for sizes and tracing."""
    from infless.models.loader import build_module

    return build_module(entry.manifest(), device="meta")


def parameter_count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def state_nbytes(module: nn.Module) -> int:
    """Bytes of every state-dict tensor (parameters and persistent buffers)."""
    return sum(t.numel() * t.element_size() for t in module.state_dict().values())


@contextlib.contextmanager
def _exclusive_lock(path: Path) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sha256(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _write_package(entry: ZooEntry, directory: Path) -> tuple[int, int]:
    """Write manifest + weights into `directory`; returns (parameters, weights file bytes)."""
    from safetensors.torch import save_file

    module = build_seeded_module(entry)
    weights_path = directory / WEIGHTS_FILE
    state = {key: tensor.contiguous() for key, tensor in module.state_dict().items()}
    # One metadata key only: safetensors writes a multi-key map in random order, and the
    # file's bytes (and so its sha256) must not depend on the run.
    save_file(state, str(weights_path), metadata={"infless.provenance": entry.provenance})
    _fsync_file(weights_path)
    weights_bytes = weights_path.stat().st_size
    manifest = entry.manifest(weights_sha256=_sha256(weights_path), weights_bytes=weights_bytes)
    manifest_path = directory / MANIFEST_FILE
    manifest_path.write_bytes(encode_manifest(manifest))
    _fsync_file(manifest_path)
    return parameter_count(module), weights_bytes


def _swap_into_place(staging: Path, target: Path) -> None:
    """Rename `staging` to `target`, moving a previous `target` aside first."""
    if target.exists():
        retired = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
        target.rename(retired / target.name)
        staging.rename(target)
        shutil.rmtree(retired, ignore_errors=True)
    else:
        staging.rename(target)


def build_zoo_package(name: str, repository: Path, *, force: bool = False) -> BuildResult:
    """Build zoo model `name` into `repository` unless a current package is there already."""
    entry = zoo_entry(name)
    target = repository / name
    started = perf_s()
    if not force and package_is_current(target, entry):
        return _cached_result(entry, target, started)
    repository.mkdir(parents=True, exist_ok=True)
    with _exclusive_lock(repository / f".{name}.lock"):
        if not force and package_is_current(target, entry):  # another builder finished first
            return _cached_result(entry, target, started)
        for stale in repository.glob(f".{name}.tmp-*"):  # left by a builder that died
            shutil.rmtree(stale, ignore_errors=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=repository))
        try:
            staging.chmod(0o755)  # mkdtemp makes it private; packages are read by workers
            parameters, weights_bytes = _write_package(entry, staging)
            _swap_into_place(staging, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    elapsed_s = perf_s() - started
    return BuildResult(
        name=name,
        path=target,
        built=True,
        parameters=parameters,
        weights_bytes=weights_bytes,
        elapsed_s=elapsed_s,
    )


def _cached_result(entry: ZooEntry, target: Path, started: float) -> BuildResult:
    manifest = load_manifest(target)
    parameters = parameter_count(build_meta_module(entry))
    elapsed_s = perf_s() - started
    return BuildResult(
        name=entry.name,
        path=target,
        built=False,
        parameters=parameters,
        weights_bytes=manifest.weights_bytes,
        elapsed_s=elapsed_s,
    )


def build_package(name: str, repository: Path, *, force: bool = False) -> Path:
    """Build (or find current) zoo package `name` in `repository`; returns its directory."""
    return build_zoo_package(name, repository, force=force).path


def ensure_package(image: str, repository: Path) -> Path:
    """The package directory for a deployment's `image`, building zoo models on demand.

    `image` is a zoo name (built into `repository` if missing: imports torch then), the name
    of a package already in `repository`, or a path to a package directory.
    """
    if is_zoo_name(image):
        if image in ZOO:
            entry = ZOO[image]
            target = repository / image
            return target if package_is_current(target, entry) else build_package(image, repository)
        if not (repository / image / MANIFEST_FILE).is_file():
            raise UnknownModel(
                f"image {image!r} is neither a zoo model ({', '.join(sorted(ZOO))}) nor a "
                f"package in {repository}; give a package directory path instead"
            )
    package_dir = package_dir_for(image, repository)
    validate_package(package_dir)
    return package_dir

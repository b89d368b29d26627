"""Torch-free checks of a function package on disk: is it there, whole, and current?

The gateway (`models.resolver`) calls these on every deploy; building a package (which
imports torch) is `models.build`'s, in a subprocess of its own.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from infless.errors import UnknownModel
from infless.models.package import PackageManifest, encode_manifest, load_manifest
from infless.models.zoo import ZooEntry


def package_is_current(package_dir: Path, entry: ZooEntry) -> bool:
    """Cheap check: manifest decodes, equals the entry's, weights file has the recorded size."""
    try:
        manifest = load_manifest(package_dir)
        weights_size = (package_dir / manifest.weights_file).stat().st_size
    except (UnknownModel, OSError):
        return False
    expected = encode_manifest(entry.manifest())
    found = encode_manifest(msgspec.structs.replace(manifest, weights_sha256="", weights_bytes=0))
    return found == expected and manifest.weights_bytes == weights_size > 0


def validate_package(package_dir: Path) -> PackageManifest:
    """A package's manifest, after checking that its weights (or program) file is there at
    its size."""
    manifest = load_manifest(package_dir)
    if manifest.format != "module":
        if not (package_dir / manifest.program_file).is_file():
            raise UnknownModel(
                f"package {package_dir}: program file {manifest.program_file} is missing"
            )
        return manifest
    weights = package_dir / manifest.weights_file
    try:
        size = weights.stat().st_size
    except OSError as exc:
        raise UnknownModel(
            f"package {package_dir}: weights file {manifest.weights_file} is missing"
        ) from exc
    if manifest.weights_bytes and size != manifest.weights_bytes:
        raise UnknownModel(
            f"package {package_dir}: {manifest.weights_file} has {size} bytes, the manifest "
            f"records {manifest.weights_bytes}; rebuild the package"
        )
    return manifest

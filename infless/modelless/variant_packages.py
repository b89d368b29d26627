"""A variant's function package on disk, written from the fp32 package it transforms.

`OUT/<variant>/` is the source package's files hard-linked (copied across file systems;
`src/` copied), its manifest naming the transform and the function
`variant_function(model, variant)`; the content digest is written again when the source
carried one. `remove` takes away a package (of a variant that is not ready) again.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import msgspec

from infless.modelless.profiles import variant_function
from infless.models.package import MANIFEST_FILE, SOURCE_DIR, PackageManifest, encode_manifest


def write_variant(
    package_dir: Path, manifest: PackageManifest, target: Path, model: str, variant: str
) -> Path:
    """`target` as `package_dir` with the variant's manifest: files hard-linked (copied where
    a link cannot be made), `src/` copied; a stale `target` is removed first."""
    if target == package_dir or target in package_dir.parents:
        raise ValueError(f"{target}: writing a variant there would remove the source package")
    remove(target)
    target.mkdir(parents=True)
    for entry in sorted(package_dir.iterdir()):
        if entry.name in {MANIFEST_FILE, "__pycache__"}:
            continue
        if entry.is_dir():
            ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
            shutil.copytree(entry, target / entry.name, ignore=ignore)
        elif entry.name != SOURCE_DIR:
            _link_or_copy(entry, target / entry.name)
    variant_manifest = msgspec.structs.replace(
        manifest, name=variant_function(model, variant), transform=variant, digest=""
    )
    (target / MANIFEST_FILE).write_bytes(encode_manifest(variant_manifest))
    if manifest.digest:  # the source carried its content digest: so does the variant
        from infless.packaging.digest import write_digest

        write_digest(target)
    return target


def remove(target: Path) -> None:
    if target.is_dir() and not target.is_symlink():
        shutil.rmtree(target)
    elif target.exists() or target.is_symlink():
        target.unlink()


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:  # another file system, or links not allowed here
        shutil.copy2(source, target)

"""A function package's content digest: one sha256 over every file's path and bytes.

The manifest takes part with its own `digest` field blanked, so the digest can be written
into the manifest it covers; everything else (weights, program, `src/`, a tokenizer) takes
part as it is. Two packages with the same digest serve the same model the same way; the
gateway's repository stores uploads under it (`sha256:<hex>`). Files are read in chunks;
symlinks and other non-regular files make a package invalid. Torch-free.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from infless.errors import UnknownModel
from infless.models.package import MANIFEST_FILE

PREFIX = "sha256:"
_CHUNK = 1 << 20
_SKIPPED = frozenset({"__pycache__"})  # written by Python when the package's source runs


def package_files(package_dir: Path) -> list[Path]:
    """The package's regular files, relative and sorted; a symlink or special file is an
    error (a package is copied and served as plain files)."""
    files = []
    for path in sorted(package_dir.rglob("*")):
        relative = path.relative_to(package_dir)
        if _SKIPPED.intersection(relative.parts) or path.suffix == ".pyc":
            continue
        if path.is_symlink():
            raise UnknownModel(f"package {package_dir}: {relative} is a symlink")
        if path.is_dir():
            continue
        if not path.is_file():
            raise UnknownModel(f"package {package_dir}: {relative} is not a regular file")
        files.append(relative)
    return files


def _manifest_bytes(path: Path) -> bytes:
    """The manifest as canonical JSON with `digest` blanked."""
    try:
        document = json.loads(path.read_bytes())
    except ValueError as exc:
        raise UnknownModel(f"{path}: not valid JSON: {exc}") from None
    if not isinstance(document, dict):
        raise UnknownModel(f"{path}: must be a JSON object")
    document["digest"] = ""
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def package_digest(package_dir: Path) -> str:
    """`sha256:<hex>` of the package's content (see the module docstring)."""
    if not (package_dir / MANIFEST_FILE).is_file():
        raise UnknownModel(f"no function package at {package_dir}: {MANIFEST_FILE} is missing")
    total = hashlib.sha256()
    for relative in package_files(package_dir):
        path = package_dir / relative
        if relative.as_posix() == MANIFEST_FILE:
            file_hash = hashlib.sha256(_manifest_bytes(path)).hexdigest()
        else:
            with path.open("rb") as handle:
                file_hash = hashlib.file_digest(handle, "sha256").hexdigest()
        total.update(f"{relative.as_posix()}\0{file_hash}\n".encode())
    return PREFIX + total.hexdigest()


def write_digest(package_dir: Path) -> str:
    """Compute the digest and record it in the manifest; returns it."""
    digest = package_digest(package_dir)
    path = package_dir / MANIFEST_FILE
    document = json.loads(path.read_bytes())
    document["digest"] = digest
    path.write_text(json.dumps(document, indent=2) + "\n")
    return digest

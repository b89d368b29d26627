"""Tar archives for the package-upload tests: good ones, and each kind of bad one."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

WEIGHTS = b"\x01\x02\x03\x04" * 16


def manifest(**changes: object) -> dict[str, object]:
    """A valid manifest (a zoo architecture; the store never builds the model)."""
    document: dict[str, object] = {
        "name": "tiny",
        "architecture": "mnist_cnn",
        "inputs": [{"name": "image", "dtype": "float32", "shape": [1, 28, 28]}],
        "outputs": [{"name": "probabilities", "dtype": "float32", "shape": [10]}],
        "weights_bytes": len(WEIGHTS),
    }
    document.update(changes)
    return document


def package_dir(root: Path, **changes: object) -> Path:
    """A package directory with a manifest, weights and a source file."""
    (root / "src").mkdir(parents=True)
    (root / "manifest.json").write_text(json.dumps(manifest(**changes)))
    (root / "weights.safetensors").write_bytes(WEIGHTS)
    (root / "src" / "net.py").write_text("X = 1\n")
    return root


def package_files(prefix: str = "", /, **changes: object) -> dict[str, bytes]:
    return {
        f"{prefix}manifest.json": json.dumps(manifest(**changes)).encode(),
        f"{prefix}weights.safetensors": WEIGHTS,
        f"{prefix}src/net.py": b"X = 1\n",
    }


def entry(
    name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"", link: str = "", size: int = -1
) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    info.size = len(data) if size < 0 else size
    info.mode = 0o755 if kind == tarfile.DIRTYPE else 0o644
    return info, data


def tarball(*entries: tuple[tarfile.TarInfo, bytes], mode: str = "w:gz") -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode) as tar:  # type: ignore[call-overload]
        for info, data in entries:
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return buffer.getvalue()


def good_entries(prefix: str = "", /, **changes: object) -> list[tuple[tarfile.TarInfo, bytes]]:
    return [entry(name, data=data) for name, data in package_files(prefix, **changes).items()]


def zeros_member(name: str, size: int) -> tuple[tarfile.TarInfo, bytes]:
    """A member of `size` zero bytes: a few KiB once gzip'd (a tar bomb's building block)."""
    return entry(name, data=b"\0" * size)

"""The package digest covers every file's path and bytes, not the digest it is written into."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infless.errors import UnknownModel
from infless.packaging.digest import package_digest, write_digest


def _package(root: Path) -> Path:
    (root / "src").mkdir(parents=True)
    (root / "manifest.json").write_text(json.dumps({"name": "m", "digest": ""}))
    (root / "weights.safetensors").write_bytes(b"\x00" * 10)
    (root / "src" / "net.py").write_text("X = 1\n")
    return root


def test_digest_is_stable_and_written_into_the_manifest_it_covers(tmp_path: Path) -> None:
    package = _package(tmp_path / "p")
    digest = package_digest(package)
    assert digest.startswith("sha256:")
    assert len(digest) == 7 + 64
    assert write_digest(package) == digest
    assert json.loads((package / "manifest.json").read_text())["digest"] == digest
    assert package_digest(package) == digest  # the recorded digest does not change it
    (package / "src" / "__pycache__").mkdir()
    (package / "src" / "__pycache__" / "net.cpython-311.pyc").write_bytes(b"x")
    assert package_digest(package) == digest  # Python's caches do not count


@pytest.mark.parametrize(
    "change",
    [
        lambda p: (p / "weights.safetensors").write_bytes(b"\x00" * 9 + b"\x01"),
        lambda p: (p / "src" / "net.py").rename(p / "src" / "other.py"),
        lambda p: (p / "labels.txt").write_text("cat\n"),
        lambda p: (p / "manifest.json").write_text(json.dumps({"name": "n", "digest": ""})),
    ],
)
def test_any_change_of_content_or_path_changes_the_digest(tmp_path: Path, change: object) -> None:
    package = _package(tmp_path / "p")
    before = package_digest(package)
    change(package)  # type: ignore[operator]
    assert package_digest(package) != before


def test_symlinks_and_missing_manifests_are_refused(tmp_path: Path) -> None:
    with pytest.raises(UnknownModel, match=r"manifest\.json is missing"):
        package_digest(tmp_path)
    package = _package(tmp_path / "p")
    (package / "passwd").symlink_to("/etc/passwd")
    with pytest.raises(UnknownModel, match="passwd is a symlink"):
        package_digest(package)

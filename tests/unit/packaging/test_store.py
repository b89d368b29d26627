"""The package store: uploads land under their digest once (re-uploading is free), bad
packages are refused with the checker's message, and no staging directory is left behind."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from infless.errors import BadRequest, InvalidPackage
from infless.packaging.archive import Limits
from infless.packaging.digest import package_digest, write_digest
from infless.packaging.store import STAGING_PREFIX, PackageStore, digest_hex
from tests.support.tarballs import (
    entry,
    good_entries,
    package_dir,
    package_files,
    tarball,
)

LIMITS = Limits(max_bytes=1 << 20)


def _add(store: PackageStore, body: bytes) -> object:
    return store.add_archive(store.new_staging(), io.BytesIO(body), LIMITS)


def _leftovers(store: PackageStore) -> list[str]:
    return [p.name for p in store.root.iterdir() if p.name.startswith(STAGING_PREFIX)]


def test_an_upload_is_stored_by_digest_once(tmp_path: Path) -> None:
    original = package_dir(tmp_path / "original")
    expected = package_digest(original)
    size = sum(p.stat().st_size for p in original.rglob("*") if p.is_file())
    store = PackageStore(tmp_path / "repo")
    first = store.add_archive(store.new_staging(), io.BytesIO(tarball(*good_entries())), LIMITS)
    assert first.created
    assert first.digest == expected
    assert first.to_json() == {"digest": expected, "image": expected, "name": "tiny", "bytes": size}
    stored = store.find(expected)
    assert stored == tmp_path / "repo" / "packages" / expected.removeprefix("sha256:")
    assert (stored / "src" / "net.py").read_text() == "X = 1\n"

    again = store.add_archive(
        store.new_staging(), io.BytesIO(tarball(*good_entries("pkg/"))), LIMITS
    )
    assert not again.created
    assert again.digest == expected
    from_files = store.add_files(package_files("1/").items(), LIMITS)
    assert from_files.digest == expected
    assert not from_files.created
    assert sorted(p.name for p in store.root.iterdir()) == [expected.removeprefix("sha256:")]
    assert store.manifest_bytes(expected) == (tmp_path / "original" / "manifest.json").read_bytes()
    assert store.manifest_bytes("sha256:" + "0" * 64) is None


@pytest.mark.parametrize(
    ("entries", "words"),
    [
        ([entry("weights.safetensors", data=b"w")], r"no manifest\.json"),
        (good_entries(name=5), r"invalid <package>/manifest\.json: Expected `str`"),
        (good_entries(inputs=[]), "at least one input"),
        (good_entries()[:1], "'weights.safetensors' is not a file of the package"),
        (good_entries(weights_bytes=3), "has 64 bytes, the manifest records 3"),
        (good_entries(weights_file="/etc/hostname", weights_bytes=0), "absolute paths"),
        (good_entries(weights_file="../../x", weights_bytes=0), "'..'"),
        (good_entries(weights_file="src", weights_bytes=0), "'src' is not a file of the package"),
        (good_entries(digest="sha256:" + "0" * 64), "digest mismatch"),
        ([*good_entries(), entry("evil", b"2", link="/x")], "a symlink"),
    ],
)
def test_bad_packages_are_refused_and_leave_nothing(
    tmp_path: Path, entries: list[tuple[object, bytes]], words: str
) -> None:
    store = PackageStore(tmp_path / "repo")
    with pytest.raises(InvalidPackage, match=words) as raised:
        _add(store, tarball(*entries))  # type: ignore[arg-type]
    assert str(tmp_path) not in raised.value.message
    assert list(store.root.iterdir()) == []


def test_a_recorded_digest_that_matches_is_accepted(tmp_path: Path) -> None:
    package = package_dir(tmp_path / "p")
    digest = write_digest(package)
    files = [
        (p.relative_to(package).as_posix(), p.read_bytes())
        for p in package.rglob("*")
        if p.is_file()
    ]
    store = PackageStore(tmp_path / "repo")
    stored = store.add_files(files, LIMITS)
    assert stored.digest == digest
    assert json.loads(store.manifest_bytes(digest) or b"")["digest"] == digest


def test_digests_are_checked_before_they_name_a_path(tmp_path: Path) -> None:
    store = PackageStore(tmp_path)
    hex_digest = "a" * 64
    assert digest_hex(f"sha256:{hex_digest}") == hex_digest
    assert digest_hex(hex_digest) == hex_digest
    for bad in ("sha256:../../etc", "sha256:" + "A" * 64, "md5:abc", "", "sha256:" + "a" * 63):
        assert digest_hex(bad) is None
        with pytest.raises(BadRequest, match="not a package digest"):
            store.path_for(bad)
    with store.staging() as staging:
        assert staging.parent == store.root
    assert _leftovers(store) == []

"""The CLI's side of a remote deploy: which images are local packages, and the tar.gz it
uploads unpacks to the same package (same digest) on the gateway."""

from __future__ import annotations

from pathlib import Path

from infless.client.packages import local_package
from infless.packaging.archive import Limits, write_archive
from infless.packaging.digest import package_digest
from infless.packaging.store import PackageStore
from tests.support.tarballs import package_dir


def test_only_package_directories_here_are_uploaded(tmp_path: Path) -> None:
    package = package_dir(tmp_path / "stack" / "my-model")
    (tmp_path / "stack" / "mnist").mkdir()
    (tmp_path / "stack" / "mnist" / "manifest.json").write_text("{}")
    base = tmp_path / "stack"
    assert local_package("./my-model", base) == package
    assert local_package("my-model", base) == package  # not a zoo model: a directory here
    assert local_package(str(package), Path("/")) == package
    assert local_package("mnist", base) is None  # a zoo name stays a zoo name
    assert local_package("./elsewhere", base) is None  # the gateway's path, maybe
    assert local_package("sha256:" + "a" * 64, base) is None


def test_the_uploaded_archive_unpacks_to_the_same_digest(tmp_path: Path) -> None:
    package = package_dir(tmp_path / "p")
    (package / "src" / "__pycache__").mkdir()
    (package / "src" / "__pycache__" / "net.cpython-311.pyc").write_bytes(b"cache")
    archive = tmp_path / "p.tar.gz"
    with archive.open("wb") as out:
        write_archive(package, out)
    store = PackageStore(tmp_path / "repo")
    with archive.open("rb") as body:
        stored = store.add_archive(store.new_staging(), body, Limits(1 << 20))
    assert stored.digest == package_digest(package)
    stored_dir = store.find(stored.digest)
    assert stored_dir is not None
    assert not (stored_dir / "src" / "__pycache__").exists()  # caches are not sent

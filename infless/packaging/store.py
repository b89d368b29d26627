"""The gateway's content-addressed package store: one directory per package, named by digest.

Each uploaded function package lives in `<repository>/packages/<hex>`, its digest
(`packaging.digest`). An upload is unpacked (`packaging.archive`) into a fresh
`packages/.staging-<random>` directory. It is checked: the manifest, the weights or program
file inside the package, and the manifest's own `digest` when it records one. Then it is
renamed to `packages/<hex>` in one step. When that digest is stored already, the staging
copy is dropped: uploading again is free. Whatever happens, the staging directory is
removed, and nothing outside `packages/` is ever written. Torch-free; blocking I/O (the
gateway calls it in a thread).
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO

from infless.errors import BadRequest, InvalidPackage, UnknownModel
from infless.models.package import MANIFEST_FILE, PackageManifest, load_manifest
from infless.models.validate import validate_package
from infless.packaging.archive import (
    Limits,
    Unpacked,
    extract_archive,
    member_path,
    package_root,
    write_files,
)
from infless.packaging.digest import PREFIX, package_digest

PACKAGES_DIR = "packages"
STAGING_PREFIX = ".staging-"
_UNPACKED = "package"  # inside a staging directory: what was unpacked
_DIGEST = re.compile(r"^(?:sha256:)?([0-9a-f]{64})$")


def digest_hex(text: str) -> str | None:
    """The hex of `sha256:<64 hex>` (or of the bare hex), None when `text` is neither."""
    match = _DIGEST.match(text)
    return match.group(1) if match else None


def is_digest_image(image: str) -> bool:
    """Does a deployment's `image` name a stored package (`sha256:...`)?"""
    return image.startswith(PREFIX)


@dataclass(frozen=True, slots=True)
class StoredPackage:
    digest: str  # "sha256:<hex>", also the image to deploy it by
    manifest: PackageManifest
    bytes: int  # the package's files, in all
    created: bool  # False: the store held this digest already

    def to_json(self) -> dict[str, object]:
        return {
            "digest": self.digest,
            "image": self.digest,
            "name": self.manifest.name,
            "bytes": self.bytes,
        }


def _check_package(root: Path, unpacked: Unpacked, prefix: PurePosixPath) -> PackageManifest:
    """The package's manifest, once the files it names are files of the package and whole;
    messages name the package `<package>`, not the staging directory."""
    try:
        manifest = load_manifest(root)
        files = {path.relative_to(prefix) for path in unpacked.files}
        name = manifest.program_file if manifest.format != "module" else manifest.weights_file
        path = member_path(name, "manifest: file")
        if path is None or path not in files:
            raise InvalidPackage(
                f"manifest: {name!r} is not a file of the package (missing, or a directory)"
            )
        return validate_package(root)
    except UnknownModel as exc:
        raise InvalidPackage(exc.message.replace(str(root), "<package>")) from None


class PackageStore:
    """Uploaded packages under `<repository>/packages`, by digest."""

    def __init__(self, repository: Path) -> None:
        self.root = repository / PACKAGES_DIR

    def path_for(self, digest: str) -> Path:
        """Where the package `digest` is (or would be) stored."""
        hex_digest = digest_hex(digest)
        if hex_digest is None:
            raise BadRequest(
                f"{digest!r} is not a package digest: expected sha256:<64 lowercase hex digits>"
            )
        return self.root / hex_digest

    def find(self, digest: str) -> Path | None:
        """The stored package's directory, None when the store does not hold it."""
        path = self.path_for(digest)
        return path if (path / MANIFEST_FILE).is_file() else None

    def digests(self) -> list[str]:
        """Every stored package's digest."""
        if not self.root.is_dir():
            return []
        return sorted(
            PREFIX + path.name
            for path in self.root.iterdir()
            if digest_hex(PREFIX + path.name) and (path / MANIFEST_FILE).is_file()
        )

    def manifest_bytes(self, digest: str) -> bytes | None:
        path = self.find(digest)
        return None if path is None else (path / MANIFEST_FILE).read_bytes()

    def new_staging(self) -> Path:
        """A fresh, private staging directory inside the store."""
        self.root.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=self.root))

    def discard(self, staging: Path) -> None:
        if staging.parent == self.root and staging.name.startswith(STAGING_PREFIX):
            shutil.rmtree(staging, ignore_errors=True)

    @contextmanager
    def staging(self) -> Iterator[Path]:
        staging = self.new_staging()
        try:
            yield staging
        finally:
            self.discard(staging)

    def add_archive(self, staging: Path, archive: IO[bytes], limits: Limits) -> StoredPackage:
        """Unpack a tar archive in `staging` (from `new_staging`) and store the package.
        Consumes `staging`: it is removed when this returns or raises."""
        try:
            unpacked_dir = staging / _UNPACKED
            unpacked_dir.mkdir(mode=0o755)
            return self._commit(unpacked_dir, extract_archive(archive, unpacked_dir, limits))
        finally:
            self.discard(staging)

    def add_files(self, files: Iterable[tuple[str, bytes]], limits: Limits) -> StoredPackage:
        """Store a package given as (relative path, content) pairs."""
        with self.staging() as staging:
            unpacked_dir = staging / _UNPACKED
            unpacked_dir.mkdir(mode=0o755)
            return self._commit(unpacked_dir, write_files(files, unpacked_dir, limits))

    def _commit(self, unpacked_dir: Path, unpacked: Unpacked) -> StoredPackage:
        prefix = package_root(unpacked.files)
        root = unpacked_dir / prefix
        manifest = _check_package(root, unpacked, prefix)
        try:
            digest = package_digest(root)
        except UnknownModel as exc:
            raise InvalidPackage(exc.message.replace(str(root), "<package>")) from None
        if manifest.digest and manifest.digest != digest:
            raise InvalidPackage(
                f"digest mismatch: the manifest records {manifest.digest}, the package's "
                f"content hashes to {digest}; rebuild the package or clear its digest"
            )
        final = self.path_for(digest)
        created = False
        if not final.exists():
            try:
                root.rename(final)
                created = True
            except OSError:
                if not final.exists():  # not a concurrent upload of the same package
                    raise
        return StoredPackage(digest, manifest, unpacked.bytes, created)

"""Deploying a local function package directory to a gateway anywhere: `infless deploy`
turns an `image` that is a package directory on this machine into `sha256:<hex>`, after
uploading the package unless the gateway has it already.

The digest (`packaging.digest`) is computed here; `HEAD /system/packages/<digest>` says
whether the gateway holds it; if not, a tar.gz of the package's files (the ones the digest
covers) is written to a temporary file and streamed to `POST /system/packages`, so a
package of gigabytes is never held in memory. Zoo names and paths that are not package
directories here pass through unchanged (the gateway resolves them). Hashing, packing and
the upload (bytes sent against the archive's size) are reported to a `progress.Reporter`.
Torch-free.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from http import HTTPStatus
from pathlib import Path

from infless.client.http import GatewayClient, Readable
from infless.errors import UnknownModel
from infless.models.package import MANIFEST_FILE, is_zoo_name
from infless.models.zoo import ZOO
from infless.packaging.archive import write_archive
from infless.packaging.digest import package_digest
from infless.progress import Quiet, Reporter, mib

ARCHIVE_TYPE = "application/gzip"
PACKAGES_ROUTE = "/system/packages"
REPORT_EVERY_BYTES = 1 << 20  # an upload's progress moves once per MiB sent ...
REPORT_STEPS = 200  # ... or per 0.5 % of the archive, when that is more


class UploadFailed(Exception):
    """Checking for or uploading a package failed; the message says how."""


def local_package(image: str, base: Path) -> Path | None:
    """The package directory `image` names on this machine (relative to `base`), None for
    a zoo model or a path that holds no package here."""
    if not image or image.startswith("sha256:") or (is_zoo_name(image) and image in ZOO):
        return None
    path = Path(image).expanduser()
    if not path.is_absolute():
        path = base / path
    return path.resolve() if (path / MANIFEST_FILE).is_file() else None


class CountedReader:
    """A file whose reads report the bytes read so far (what an upload has sent)."""

    def __init__(
        self, file: Readable, report: Callable[[int], None], every_bytes: int = REPORT_EVERY_BYTES
    ) -> None:
        self._file = file
        self._report = report
        self._every_bytes = every_bytes
        self.read_bytes = 0
        self._reported = 0

    def read(self, size: int = -1, /) -> bytes:
        chunk = self._file.read(size)
        self.read_bytes += len(chunk)
        if not chunk or self.read_bytes - self._reported >= self._every_bytes:
            self._reported = self.read_bytes
            self._report(self.read_bytes)
        return chunk


class PackageUploader:
    """Uploads local packages to one gateway, each at most once per run."""

    def __init__(
        self,
        client: GatewayClient,
        say: Callable[[str], None] = print,
        progress: Reporter | None = None,
    ) -> None:
        self._client = client
        self._say = say
        self._progress = progress or Quiet()
        self._images: dict[Path, str] = {}

    def image_for(self, package_dir: Path, label: str) -> str:
        """The image (`sha256:<hex>`) that deploys `package_dir`, uploaded if needed."""
        known = self._images.get(package_dir)
        if known is not None:
            return known
        try:
            return self._image_for(package_dir, label)
        finally:
            self._progress.close()  # the bar goes before the command prints what it did

    def _image_for(self, package_dir: Path, label: str) -> str:
        progress = self._progress
        progress.begin(f"{label}: hashing the package")
        try:
            digest = package_digest(package_dir)
        except UnknownModel as exc:
            raise UploadFailed(exc.message) from None
        client = self._client
        reply = client.call("HEAD", f"{PACKAGES_ROUTE}/{digest}")
        if reply.status == 200:
            progress.close()
            self._say(f"{label}: already on the gateway ({digest})")
        elif reply.status == 404:
            with tempfile.TemporaryFile(prefix="infless-package-") as archive:
                progress.begin(f"{label}: packing")
                write_archive(package_dir, archive)
                size = archive.tell()
                archive.seek(0)
                progress.begin(f"{label}: uploading", total=size)

                def sent(done: int) -> None:
                    progress.update(done, note=f"{mib(done)} of {mib(size)}")

                reader = CountedReader(archive, sent, max(REPORT_EVERY_BYTES, size // REPORT_STEPS))
                reply = client.upload(PACKAGES_ROUTE, reader, size, ARCHIVE_TYPE)
            progress.close()
            if reply.status >= 400:
                raise UploadFailed(f"uploading {package_dir} ({reply.status}): {reply.error_text}")
            digest = str(reply.json()["digest"])
            self._say(f"uploaded {label} {digest} ({size / 2**20:.1f} MiB)")
        else:
            reason = reply.error_text or HTTPStatus(reply.status).phrase
            raise UploadFailed(f"asking the gateway for {digest} ({reply.status}): {reason}")
        self._images[package_dir] = digest
        return digest

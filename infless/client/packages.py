"""Deploying a local function package directory to a gateway anywhere: `infless deploy`
turns an `image` that is a package directory on this machine into `sha256:<hex>`, after
uploading the package unless the gateway has it already.

The digest (`packaging.digest`) is computed here; `HEAD /system/packages/<digest>` says
whether the gateway holds it; if not, a tar.gz of the package's files (the ones the digest
covers) is written to a temporary file and streamed to `POST /system/packages`, so a
package of gigabytes is never held in memory. Zoo names and paths that are not package
directories here pass through unchanged (the gateway resolves them). Torch-free.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from http import HTTPStatus
from pathlib import Path

from infless.client.http import GatewayClient
from infless.errors import UnknownModel
from infless.models.package import MANIFEST_FILE, is_zoo_name
from infless.models.zoo import ZOO
from infless.packaging.archive import write_archive
from infless.packaging.digest import package_digest

ARCHIVE_TYPE = "application/gzip"
PACKAGES_ROUTE = "/system/packages"


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


class PackageUploader:
    """Uploads local packages to one gateway, each at most once per run."""

    def __init__(self, client: GatewayClient, say: Callable[[str], None] = print) -> None:
        self._client = client
        self._say = say
        self._images: dict[Path, str] = {}

    def image_for(self, package_dir: Path, label: str) -> str:
        """The image (`sha256:<hex>`) that deploys `package_dir`, uploaded if needed."""
        known = self._images.get(package_dir)
        if known is not None:
            return known
        try:
            digest = package_digest(package_dir)
        except UnknownModel as exc:
            raise UploadFailed(exc.message) from None
        client = self._client
        reply = client.call("HEAD", f"{PACKAGES_ROUTE}/{digest}")
        if reply.status == 200:
            self._say(f"{label}: already on the gateway ({digest})")
        elif reply.status == 404:
            with tempfile.TemporaryFile(prefix="infless-package-") as archive:
                write_archive(package_dir, archive)
                size = archive.tell()
                archive.seek(0)
                reply = client.upload(PACKAGES_ROUTE, archive, size, ARCHIVE_TYPE)
            if reply.status >= 400:
                raise UploadFailed(f"uploading {package_dir} ({reply.status}): {reply.error_text}")
            digest = str(reply.json()["digest"])
            self._say(f"uploaded {label} {digest} ({size / 2**20:.1f} MiB)")
        else:
            reason = reply.error_text or HTTPStatus(reply.status).phrase
            raise UploadFailed(f"asking the gateway for {digest} ({reply.status}): {reason}")
        self._images[package_dir] = digest
        return digest

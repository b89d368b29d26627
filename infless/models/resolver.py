"""Gateway-side package resolution: an `image` becomes a package directory and its manifest.

An image is a zoo name, a package directory on the gateway's host, or `sha256:<hex>`, a
package uploaded into the repository's store (`packaging.store`). A zoo name whose package
is not built yet is built by a short-lived `infless models build` subprocess, so torch never
loads in the gateway. Builds of the same image are coalesced. A package whose
`requirements` name distributions this Python lacks is refused; one installed at another
version than required is only logged.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path

from infless.errors import BadRequest, MissingRequirements, UnknownModel
from infless.models.package import MANIFEST_FILE, PackageManifest, is_zoo_name, package_dir_for
from infless.models.requirements import check_requirements
from infless.models.validate import package_is_current, validate_package
from infless.models.zoo import ZOO
from infless.packaging.store import PackageStore, is_digest_image

log = logging.getLogger(__name__)


def require(image: str, manifest: PackageManifest) -> None:
    """Refuse a package whose requirements are not installed; warn about other versions."""
    check = check_requirements(manifest.requirements)
    if not check.ok:
        raise MissingRequirements(
            f"image {image!r} ({manifest.name}) needs distributions this gateway's Python "
            f"({sys.executable}) lacks: {check.problem()}; install them there, then deploy again"
        )
    if check.mismatched:
        log.warning(
            "image %s (%s): installed at other versions than required: %s",
            image,
            manifest.name,
            ", ".join(check.mismatched),
        )


class PackageResolver:
    def __init__(
        self, repository: Path, python: str = "", packages: PackageStore | None = None
    ) -> None:
        self.repository = repository
        self.packages = packages or PackageStore(repository)
        self._python = python or sys.executable
        self._builds: dict[str, asyncio.Task[None]] = {}

    async def resolve(self, image: str) -> tuple[Path, PackageManifest]:
        if is_digest_image(image):
            package_dir = self._stored(image)
        else:
            package_dir = await self._local(image)
        manifest = validate_package(package_dir)
        require(image, manifest)
        return package_dir, manifest

    def _stored(self, image: str) -> Path:
        try:
            package_dir = self.packages.find(image)
        except BadRequest as exc:  # a malformed digest: the message gives the expected form
            raise UnknownModel(f"image: {exc.message}") from None
        if package_dir is None:
            raise UnknownModel(
                f"image {image!r} is not in this gateway's package store; upload the package "
                "first (POST /system/packages with its tar.gz, or `infless deploy` with the "
                "local package directory as the image)"
            )
        return package_dir

    async def _local(self, image: str) -> Path:
        package_dir = package_dir_for(image, self.repository)
        entry = ZOO.get(image)
        if entry is not None and not package_is_current(package_dir, entry):
            task = self._builds.get(image)
            if task is None:
                task = self._builds[image] = asyncio.create_task(self._build(image))
                task.add_done_callback(lambda _: self._builds.pop(image, None))
            await asyncio.shield(task)
        elif entry is None and not (package_dir / MANIFEST_FILE).exists():
            where = "zoo model" if is_zoo_name(image) else "package directory"
            raise UnknownModel(
                f"image {image!r} is neither a zoo model ({', '.join(sorted(ZOO))}) nor a "
                f"function package ({package_dir}/{MANIFEST_FILE} is missing); name a {where} "
                "that exists"
            )
        return package_dir

    async def _build(self, image: str) -> None:
        process = await asyncio.create_subprocess_exec(
            self._python,
            "-m",
            "infless.cli",
            "models",
            "build",
            image,
            "--repository",
            str(self.repository),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        _, stderr = await process.communicate()
        if process.returncode != 0:
            lines = [line for line in stderr.decode(errors="replace").splitlines() if line.strip()]
            reason = lines[-1] if lines else f"exit code {process.returncode}"
            raise UnknownModel(f"image {image!r} is not a buildable zoo model: {reason}")

"""Gateway-side package resolution: an `image` becomes a package directory and its manifest.

A zoo name whose package is not built yet is built by a short-lived `infless models build`
subprocess, so torch never loads in the gateway. Builds of the same image are coalesced.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from infless.errors import UnknownModel
from infless.models.package import MANIFEST_FILE, PackageManifest, is_zoo_name, package_dir_for
from infless.models.validate import package_is_current, validate_package
from infless.models.zoo import ZOO


class PackageResolver:
    def __init__(self, repository: Path, python: str = "") -> None:
        self.repository = repository
        self._python = python or sys.executable
        self._builds: dict[str, asyncio.Task[None]] = {}

    async def resolve(self, image: str) -> tuple[Path, PackageManifest]:
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
        return package_dir, validate_package(package_dir)

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

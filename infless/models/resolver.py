"""Gateway-side package resolution: an `image` becomes a package directory and its manifest.

A zoo name whose package is not built yet is built by a short-lived `infless models build`
subprocess, so torch never loads in the gateway. Builds of the same image are coalesced.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from infless.errors import UnknownModel
from infless.models.package import (
    MANIFEST_FILE,
    PackageManifest,
    is_zoo_name,
    load_manifest,
    package_dir_for,
)


class PackageResolver:
    def __init__(self, repository: Path, python: str = "") -> None:
        self.repository = repository
        self._python = python or sys.executable
        self._builds: dict[str, asyncio.Task[None]] = {}

    async def resolve(self, image: str) -> tuple[Path, PackageManifest]:
        package_dir = package_dir_for(image, self.repository)
        if not (package_dir / MANIFEST_FILE).exists():
            if not is_zoo_name(image):
                raise UnknownModel(
                    f"image {image!r}: no function package at {package_dir} "
                    f"({MANIFEST_FILE} missing); name a zoo model (`infless models list`) "
                    "or a package directory"
                )
            task = self._builds.get(image)
            if task is None:
                task = self._builds[image] = asyncio.create_task(self._build(image))
                task.add_done_callback(lambda _: self._builds.pop(image, None))
            await asyncio.shield(task)
        return package_dir, load_manifest(package_dir)

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

"""Model structures of deployed packages, described once in a subprocess and cached on disk.

The gateway never imports torch, so a package's `ModelStructure` (its operations and fx
graph, `infless.transform.describe`) is made by `python -m infless.transform.describe` and
kept as `<state>/structures/<manifest digest>.json`: the digest covers the architecture,
its arguments and the weights' hash, so a changed package is described again. `get` answers
at once from memory or disk (None while a description runs: a start never waits for one);
`prepare` describes packages in the background, several in one subprocess.
Gateway side: never imports torch.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import sys
from collections.abc import Iterable
from pathlib import Path

from infless.models.package import MANIFEST_FILE
from infless.transform.structure import ModelStructure

log = logging.getLogger(__name__)


def structure_key(package_dir: Path) -> str | None:
    """The digest of the package's manifest (None: no readable manifest)."""
    try:
        return hashlib.sha256((package_dir / MANIFEST_FILE).read_bytes()).hexdigest()[:24]
    except OSError:
        return None


class StructureCache:
    def __init__(self, directory: Path, timeout_s: float, python: str = "") -> None:
        self._dir = directory
        self._timeout_s = timeout_s
        self._python = python or sys.executable
        self._known: dict[str, ModelStructure] = {}
        self._running: dict[str, asyncio.Task[None]] = {}

    def get(self, package_dir: Path) -> ModelStructure | None:
        key = structure_key(package_dir)
        if key is None:
            return None
        found = self._known.get(key)
        if found is None:
            path = self._dir / f"{key}.json"
            try:
                found = ModelStructure.from_json(path.read_text())
            except (OSError, ValueError, KeyError, TypeError):
                return None
            self._known[key] = found
        return found

    def prepare(self, package_dirs: Iterable[Path]) -> None:
        """Describe the packages not known nor being described, in one background
        subprocess (one torch import for all)."""
        wanted: dict[str, Path] = {}
        for package_dir in package_dirs:
            key = structure_key(package_dir)
            if key is not None and key not in self._running and self.get(package_dir) is None:
                wanted.setdefault(key, package_dir)
        if not wanted:
            return
        task = asyncio.create_task(self._describe(wanted), name="describe-packages")
        for key in wanted:
            self._running[key] = task
        task.add_done_callback(lambda _: [self._running.pop(k, None) for k in wanted])

    async def _describe(self, wanted: dict[str, Path]) -> None:
        dirs = [str(d) for d in wanted.values()]
        process = await asyncio.create_subprocess_exec(
            self._python,
            "-m",
            "infless.transform.describe",
            *dirs,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            out, err = await asyncio.wait_for(process.communicate(), self._timeout_s)
        except TimeoutError:
            process.kill()
            await process.wait()
            log.warning("describing %s took over %.0f s", ", ".join(dirs), self._timeout_s)
            return
        if process.returncode != 0:
            log.warning("describing %s failed: %s", ", ".join(dirs), err.decode(errors="replace"))
            return
        for key, line in zip(wanted, out.decode().splitlines(), strict=False):
            try:
                structure = ModelStructure.from_json(line)
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("describing %s gave no structure: %s", wanted[key], exc)
                continue
            self._save(key, structure)

    def _save(self, key: str, structure: ModelStructure) -> None:
        self._dir.mkdir(parents=True, exist_ok=True)
        staging = self._dir / f".{key}.{os.getpid()}.tmp"
        staging.write_text(structure.to_json())
        staging.replace(self._dir / f"{key}.json")
        self._known[key] = structure
        if not structure.transformable:
            log.info("%s cannot be transformed: %s", structure.model_key, structure.reason)

    async def close(self) -> None:
        for task in list(self._running.values()):
            task.cancel()
        await asyncio.gather(*self._running.values(), return_exceptions=True)

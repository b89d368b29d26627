"""What a previous gateway left in the tensor store's root, read after a restart.

Owns the survey of the root: which tenant directories a store made, which tensor files
they hold, which temp files a writer left, and which paths are none of these.
It must not change anything: the store adopts the tensors and removes stale temp files
under its own locks (`TensorStore.adopt_or_clean`). Gateway side: never imports torch.
"""

from __future__ import annotations

import stat
from dataclasses import dataclass
from pathlib import Path

from infless.weights.package_index import KEY_PATTERN
from infless.weights.store_layout import LOCK_FILE, TEMP_PREFIX, TENANT_PATTERN


@dataclass(frozen=True, slots=True)
class AdoptReport:
    adopted_files: int
    adopted_bytes: int
    removed_temp_files: int
    ignored: tuple[str, ...]  # paths left alone: not tenants, keys, temps or locks


@dataclass(frozen=True, slots=True)
class LeftTensor:
    """A complete tensor file named by its content key."""

    tenant: str
    key: str
    size_bytes: int


@dataclass(frozen=True, slots=True)
class LeftTemp:
    """A temp file of tensor `key`: stale when nobody holds that tensor's lock."""

    tenant: str
    key: str
    path: Path


@dataclass(frozen=True, slots=True)
class Survey:
    tenants: tuple[str, ...]  # directories a store made (they hold its lock file)
    tensors: tuple[LeftTensor, ...]
    temps: tuple[LeftTemp, ...]
    ignored: tuple[str, ...]  # in the order they were found


def survey(root: Path) -> Survey:
    """Read `root` once. Only directories holding a store's lock file are looked into."""
    tenants: list[str] = []
    tensors: list[LeftTensor] = []
    temps: list[LeftTemp] = []
    ignored: list[str] = []
    if not root.is_dir():
        return Survey(tenants=(), tensors=(), temps=(), ignored=())
    for directory in sorted(root.iterdir()):
        ours = directory.is_dir() and not directory.is_symlink()
        if not ours or not TENANT_PATTERN.match(directory.name):
            ignored.append(str(directory))
            continue
        if not (directory / LOCK_FILE).is_file():
            ignored.append(str(directory))  # not made by a store: never touch it
            continue
        tenant = directory.name
        tenants.append(tenant)
        for child in sorted(directory.iterdir()):
            name = child.name
            info = child.lstat()
            key = name[len(TEMP_PREFIX) :].split("-", 1)[0]
            if name == LOCK_FILE:
                continue
            if name.startswith(TEMP_PREFIX) and KEY_PATTERN.match(key):
                temps.append(LeftTemp(tenant=tenant, key=key, path=child))
            elif KEY_PATTERN.match(name) and stat.S_ISREG(info.st_mode):
                tensors.append(LeftTensor(tenant=tenant, key=name, size_bytes=info.st_size))
            else:
                ignored.append(str(child))
    return Survey(
        tenants=tuple(tenants), tensors=tuple(tensors), temps=tuple(temps), ignored=tuple(ignored)
    )

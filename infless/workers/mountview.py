"""What a sandboxed worker sees of the file system: a plan of mounts (pure), and applying it.

It all happens in the worker's own mount namespace. `workers.sandbox` unshares it and makes
every mount a slave of the host's, so nothing here propagates back. The plan has three kinds
of mount:

- **veils**: an empty, read-only tmpfs over each hidden directory. These are the gateway's
  state directory (`registry.sqlite`, `secrets/`, the model repository with every tenant's
  packages) and the tensor store's root: they do not exist for the worker. One more veil
  covers the highest directory the tenant's uid could not traverse on the way to the Python
  runtime (a home directory closed to others, with the interpreter in it), so that the
  runtime can be bound back below it.
- **keeps**: directories bound back read-only at their own paths under a veil: the tenant's
  packages, its store directory, the runtime (`sys.path`, the prefixes).
- **scratch**: one size-limited, writable tmpfs (mode 1777) on /tmp, also bound on /var/tmp
  and /dev/shm (one quota for all three). It is the only place a worker can write.

Then every mount is made read-only (`mount_setattr(AT_RECURSIVE)`, else a remount per mount
point) and the scratch mounts writable again. The working directory becomes `/`: a directory
opened before the veils would otherwise stay reachable through it.

`plan_view` orders the mounts by depth, so a keep inside a veil inside a keep works. It drops
mounts that change nothing. `apply_view` runs as root in the worker. Any step that fails
raises `MountError`, and the worker then refuses to load. Worker side, ctypes and os only;
never torch.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import stat
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC = 32, 4096, 16384
AT_RECURSIVE = 0x8000
MOUNT_ATTR_RDONLY = 0x1
_SYS_MOUNT_SETATTR = 442  # the same number on every architecture (Linux 5.12+)
_VEIL_OPTIONS = b"size=64k,mode=0755"

Kind = Literal["veil", "scratch", "keep"]


class MountError(RuntimeError):
    """The worker's mount view could not be built: it must not load its package."""


@dataclass(frozen=True, slots=True)
class MountOp:
    kind: Kind
    path: Path


def _covers(outer: Path, inner: Path) -> bool:
    return inner != outer and inner.is_relative_to(outer)


def plan_view(
    hide: Iterable[Path],
    keep: Iterable[Path],
    scratch: Sequence[Path],
    runtime: Iterable[Path] = (),
    blocked: Callable[[Path], Path | None] = lambda _path: None,
) -> list[MountOp]:
    """The mounts to make, shallow first. `runtime` directories are kept only where a veil
    or the scratch covers them; `blocked(path)` names the directory the tenant cannot
    traverse above `path` (None: it can reach it), which is veiled. Pure."""
    runtime = list(runtime)
    veils = set(hide) | {b for b in map(blocked, runtime) if b is not None}
    wanted = (
        [MountOp("scratch", p) for p in scratch]
        + [MountOp("veil", p) for p in veils]
        + [MountOp("keep", p) for p in {*keep, *runtime}]
    )
    rank = {"scratch": 0, "veil": 1, "keep": 2}
    wanted.sort(key=lambda op: (len(op.path.parts), rank[op.kind], str(op.path)))
    planned: list[MountOp] = []
    for op in wanted:
        if any(p.path == op.path for p in planned):
            continue  # the same directory asked twice: the first (scratch, veil) wins
        covering = [p for p in planned if _covers(p.path, op.path)]
        nearest = max(covering, key=lambda p: len(p.path.parts), default=None)
        hidden = nearest is not None and nearest.kind != "keep"
        if op.kind == "scratch" or (op.kind == "veil") != hidden:
            planned.append(op)  # a veil under a veil, or a keep in plain sight: no-op
    return planned


def searchable(path: Path, uid: int, gid: int) -> bool:
    """Whether `uid`:`gid` may search the directory `path` itself, by its permission bits."""
    try:
        info = path.stat()
    except OSError:
        return False
    if not stat.S_ISDIR(info.st_mode):
        return False
    if info.st_uid == uid:
        return bool(info.st_mode & stat.S_IXUSR)
    if info.st_gid == gid:
        return bool(info.st_mode & stat.S_IXGRP)
    return bool(info.st_mode & stat.S_IXOTH)


def traversal_block(path: Path, uid: int, gid: int) -> Path | None:
    """The highest directory above (or at) `path` that `uid`:`gid` may not search (None:
    it can reach `path`, or `path` is not there). Reads the file system; no mounts."""
    current = Path("/")
    for part in path.parts[1:]:
        current = current / part
        if not current.is_dir():
            return None  # nothing to keep there
        if not searchable(current, uid, gid):
            return current
    return None


def runtime_dirs(usable: Callable[[Path], bool] = lambda _path: True) -> list[Path]:
    """The directories this Python needs to read: `sys.path`, the prefixes and the `infless`
    package's own directory (real paths), those `usable` (the tenant may search: one it may
    not, kept, would only cover what is kept below it). The working directory `-m` put first
    on `sys.path` is left out: it is the gateway's (its config file, often its state), and
    packages import from `src/`."""
    path = list(sys.path)
    if path and path[0] and os.path.realpath(path[0]) == os.path.realpath(Path.cwd()):
        path = path[1:]  # `-m`'s working directory (the gateway's): never a worker's to read
    # infless itself, wherever it is: an editable install maps it from the checkout by an
    # import hook, not by sys.path (and a checkout under /tmp is under the scratch)
    package = Path(__file__).resolve().parent.parent
    entries = [*path, sys.prefix, sys.base_prefix, sys.exec_prefix, str(package)]
    found: dict[Path, None] = {}
    for entry in entries:
        if not entry or not Path(entry).is_absolute():
            continue
        real = Path(os.path.realpath(entry))
        if real.is_file():  # a zip archive on sys.path: keep its directory
            real = real.parent
        if real.is_dir() and usable(real):
            found.setdefault(real, None)
    return list(found)


# -- applying -------------------------------------------------------------------------------


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_ulong,
        ctypes.c_char_p,
    ]
    return libc


def _mount(
    libc: ctypes.CDLL,
    source: bytes | None,
    target: Path,
    fstype: bytes | None,
    flags: int,
    options: bytes | None,
    what: str,
) -> None:
    if libc.mount(source, bytes(target), fstype, flags, options) != 0:
        code = ctypes.get_errno()
        raise MountError(f"mount view: {what} {target} failed: {os.strerror(code)} (errno {code})")


def _set_readonly(libc: ctypes.CDLL, path: Path, readonly: bool, recursive: bool) -> bool:
    """mount_setattr; False where the kernel lacks it (ENOSYS): the caller remounts."""
    attr = _MountAttr(MOUNT_ATTR_RDONLY if readonly else 0, 0 if readonly else MOUNT_ATTR_RDONLY)
    flags = AT_RECURSIVE if recursive else 0
    fd = -100  # AT_FDCWD
    result = libc.syscall(
        _SYS_MOUNT_SETATTR, fd, bytes(path), flags, ctypes.byref(attr), ctypes.sizeof(attr)
    )
    if result == 0:
        return True
    code = ctypes.get_errno()
    if code == 38:  # ENOSYS
        return False
    raise MountError(f"mount view: mount_setattr on {path} failed: {os.strerror(code)}")


def _mount_points() -> list[tuple[Path, int]]:
    """This namespace's mount points with the flags a bind remount must keep."""
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        options = set(fields[5].split(","))
        flags = sum(
            f
            for name, f in (("nosuid", MS_NOSUID), ("nodev", MS_NODEV), ("noexec", MS_NOEXEC))
            if name in options
        )
        path = fields[4].encode().decode("unicode_escape")  # \040 for a space
        points.append((Path(path), flags))
    return points


def _remount_readonly(libc: ctypes.CDLL, writable: set[Path]) -> None:
    for path, flags in _mount_points():
        if path in writable:
            continue
        remount = MS_REMOUNT | MS_BIND | MS_RDONLY | flags
        with contextlib.suppress(MountError):  # a mount point hidden under a later mount
            _mount(libc, None, path, None, remount, None, "remounting read-only")


def apply_view(plan: Sequence[MountOp], scratch_bytes: int, shared: Sequence[Path] = ()) -> None:
    """Make `plan`'s mounts in this (already private) mount namespace, then everything
    read-only but the scratch and the host's `shared` directories; see the docstring."""
    libc = _libc()
    sources: dict[Path, int] = {}
    try:
        for op in plan:
            if op.kind == "keep":
                with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                    flags = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
                    sources[op.path] = os.open(op.path, flags)
        writable: list[Path] = []
        for op in plan:
            _apply_one(libc, op, sources, writable, scratch_bytes)
        for path in shared:  # a mount point of its own, so that it alone stays writable
            if path.is_dir():
                _mount(libc, bytes(path), path, None, MS_BIND | MS_REC, None, "binding")
                writable.append(path)
        if _set_readonly(libc, Path("/"), readonly=True, recursive=True):
            for path in writable:
                _set_readonly(libc, path, readonly=False, recursive=False)
        else:
            _remount_readonly(libc, set(writable))
        os.chdir("/")
    finally:
        for fd in sources.values():
            os.close(fd)


def _apply_one(
    libc: ctypes.CDLL,
    op: MountOp,
    sources: dict[Path, int],
    scratch: list[Path],
    scratch_bytes: int,
) -> None:
    hardened = MS_NOSUID | MS_NODEV
    if op.kind == "keep":
        fd = sources.get(op.path)
        if fd is None:
            return  # gone since it was asked for: nothing to show
        op.path.mkdir(parents=True, exist_ok=True)  # inside a veil or the scratch
        source = f"/proc/self/fd/{fd}".encode()
        _mount(libc, source, op.path, None, MS_BIND | MS_REC, None, "binding back")
        return
    if not op.path.is_dir():
        return  # hidden already by a mount above it, or never there
    if op.kind == "veil":
        _mount(libc, b"tmpfs", op.path, b"tmpfs", hardened | MS_NOEXEC, _VEIL_OPTIONS, "veiling")
    elif not scratch:
        options = f"size={scratch_bytes},mode=1777".encode()
        _mount(libc, b"tmpfs", op.path, b"tmpfs", hardened, options, "mounting scratch on")
        scratch.append(op.path)
    else:
        _mount(libc, bytes(scratch[0]), op.path, None, MS_BIND, None, "binding scratch on")
        scratch.append(op.path)

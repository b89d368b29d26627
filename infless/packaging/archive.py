"""Unpacking an uploaded function package safely, from a tar archive or from named files.

The archive is usually gzip'd; named files are the Open Inference Protocol's `file:<path>`
load parameters. Only regular files and directories are written, all under one fresh
directory that nobody else writes.

A member is refused, with an error naming it, before anything of it is written, when it has
an absolute name or `..` components, is a symlink, hard link, device, fifo or sparse member,
or is a name given twice. So is an upload of more than `Limits.max_members` members or more
than `Limits.max_bytes` bytes in all. Files are created with O_EXCL | O_NOFOLLOW and modes of
our own (0644 / 0755), never the archive's.

`package_root` finds the package inside what was written: the root, or its single top-level
directory (`pkg/...`, Triton's `1/...`) when the manifest is there. Torch-free; blocking I/O
(the gateway runs it in a thread).
"""

from __future__ import annotations

import errno
import gzip
import os
import shutil
import tarfile
import zlib
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO

from infless.errors import InvalidPackage, MalformedBody, PayloadTooLarge
from infless.models.package import MANIFEST_FILE
from infless.packaging.digest import package_files

MAX_MEMBERS = 10_000
_CHUNK = 1 << 20
_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
# errors that say something about the member's name or place, not about this machine
_NAME_ERRNOS = frozenset({errno.EEXIST, errno.ENOTDIR, errno.EISDIR, errno.ENAMETOOLONG})


@dataclass(frozen=True, slots=True)
class Limits:
    """How much one package may hold: bytes of file content in all, and members."""

    max_bytes: int
    max_members: int = MAX_MEMBERS
    setting: str = "gateway.max_package_bytes"  # named in the 413's message


@dataclass(slots=True)
class Unpacked:
    """What was written: every file's path (relative to the destination) and the bytes."""

    files: list[PurePosixPath] = field(default_factory=list)
    bytes: int = 0
    members: int = 0


def member_path(name: str, what: str = "archive member") -> PurePosixPath | None:
    """A member's name as a relative path; None for the root itself ("." or "./").
    Absolute names and `..` components are refused."""
    if name.startswith("/"):
        raise InvalidPackage(f"{what} {name!r}: absolute paths are not allowed in a package")
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise InvalidPackage(f"{what} {name!r}: '..' is not allowed in a package path")
    if "\0" in name:
        raise InvalidPackage(f"{what} {name!r}: NUL is not allowed in a package path")
    return PurePosixPath(*parts) if parts else None


def member_kind_problem(member: tarfile.TarInfo) -> str | None:
    """Why a tar member may not be unpacked (its type), or None for a file or directory."""
    if member.issym() or member.islnk():
        kind = "a symlink" if member.issym() else "a hard link"
        return f"{kind} (to {member.linkname!r})"
    if member.issparse():
        return "a sparse file"
    if member.isreg() or member.isdir():
        return None
    if member.ischr() or member.isblk():
        return "a device"
    return "a fifo" if member.isfifo() else f"an entry of tar type {member.type!r}"


def package_root(files: Collection[PurePosixPath]) -> PurePosixPath:
    """Where the package is among `files`: the root when it holds the manifest, else the
    single top-level directory every file is under, when that holds the manifest."""
    if PurePosixPath(MANIFEST_FILE) in files:
        return PurePosixPath()
    tops = {path.parts[0] for path in files if len(path.parts) > 1}
    loose = any(len(path.parts) == 1 for path in files)
    if len(tops) == 1 and not loose:
        (top,) = tops
        if PurePosixPath(top, MANIFEST_FILE) in files:
            return PurePosixPath(top)
    raise InvalidPackage(
        f"no {MANIFEST_FILE} at the package's root, nor under a single top-level directory "
        "(pkg/..., Triton's 1/...); a package's files include its manifest"
    )


class _Writer:
    """Writes members under `dest`, counting members and bytes against the limits."""

    def __init__(self, dest: Path, limits: Limits, what: str) -> None:
        self._dest = dest
        self._limits = limits
        self._what = what
        self.unpacked = Unpacked()

    def count(self, name: str) -> None:
        self.unpacked.members += 1
        if self.unpacked.members > self._limits.max_members:
            raise InvalidPackage(
                f"{self._what} {name!r}: more than {self._limits.max_members} members; "
                "a package may hold at most that many files and directories"
            )

    def _charge(self, name: str, size: int) -> None:
        total = self.unpacked.bytes + size
        if total > self._limits.max_bytes:
            raise PayloadTooLarge(
                f"{self._what} {name!r}: the package's files exceed {self._limits.setting} "
                f"= {self._limits.max_bytes} bytes"
            )
        self.unpacked.bytes = total

    def _refuse(self, name: str, exc: OSError, twice: str) -> InvalidPackage:
        if exc.errno not in _NAME_ERRNOS:
            raise exc  # this machine's trouble (a full disk), not the member's
        reason = twice if exc.errno == errno.EEXIST else exc.strerror
        return InvalidPackage(f"{self._what} {name!r}: cannot be unpacked: {reason}")

    def _parents(self, name: str, path: PurePosixPath) -> None:
        try:
            (self._dest / path).mkdir(mode=0o755, parents=True, exist_ok=True)
        except OSError as exc:
            raise self._refuse(name, exc, "a file of the package has that name") from None

    def directory(self, name: str, path: PurePosixPath) -> None:
        self._parents(name, path)

    def file(self, name: str, path: PurePosixPath, size: int, source: IO[bytes] | bytes) -> None:
        self._charge(name, size)
        if path.parent.parts:
            self._parents(name, path.parent)
        try:
            fd = os.open(self._dest / path, _FILE_FLAGS, 0o644)
        except OSError as exc:
            raise self._refuse(name, exc, "it is given twice") from None
        with os.fdopen(fd, "wb") as out:
            if isinstance(source, bytes):
                out.write(source)
            else:
                shutil.copyfileobj(source, out, _CHUNK)
        self.unpacked.files.append(path)


def extract_archive(archive: IO[bytes], dest: Path, limits: Limits) -> Unpacked:
    """Unpack a tar stream (gzip, bzip2, xz or none) into the empty directory `dest`."""
    writer = _Writer(dest, limits, "archive member")
    try:
        with tarfile.open(fileobj=archive, mode="r|*") as tar:
            for member in tar:
                name = member.name
                writer.count(name)
                problem = member_kind_problem(member)
                if problem is not None:
                    raise InvalidPackage(
                        f"archive member {name!r} is {problem}; a package holds only regular "
                        "files and directories"
                    )
                path = member_path(name)
                if member.isdir():
                    if path is not None:
                        writer.directory(name, path)
                    continue
                if path is None:
                    raise InvalidPackage(f"archive member {name!r}: a file needs a name")
                source = tar.extractfile(member)
                if source is None:  # not reachable for a regular member
                    raise InvalidPackage(f"archive member {name!r}: its content cannot be read")
                writer.file(name, path, member.size, source)
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise MalformedBody(
            f"the body is not a readable tar archive (tar.gz expected): {exc or type(exc)}"
        ) from None
    return writer.unpacked


def write_files(files: Iterable[tuple[str, bytes]], dest: Path, limits: Limits) -> Unpacked:
    """Write named files (relative paths) into the empty directory `dest`."""
    writer = _Writer(dest, limits, "file")
    for name, content in files:
        writer.count(name)
        path = member_path(name, "file")
        if path is None:
            raise InvalidPackage(f"file {name!r}: a file needs a name")
        writer.file(name, path, len(content), content)
    return writer.unpacked


def write_archive(package_dir: Path, out: IO[bytes]) -> None:
    """A tar.gz of the package's files, at the archive's root."""
    with tarfile.open(fileobj=out, mode="w:gz", compresslevel=1) as tar:
        for relative in package_files(package_dir):
            tar.add(package_dir / relative, arcname=relative.as_posix(), recursive=False)

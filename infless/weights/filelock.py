"""File primitives of the tensor store: per-tensor locks across threads and processes, copying.

Gateway side: never imports torch. A tensor's lock is a write record lock on one byte of its
tenant's lock file, taken as an open-file-description lock (`F_OFD_SETLKW`, Linux >= 3.15):
it excludes other processes and other `KeyLocks` objects, and unlike classic POSIX locks it
is not dropped when some other descriptor of the file is closed. Threads sharing one
description are excluded by a stripe of in-process locks chosen by the same byte.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

_STRIPES = 64
_FLOCK = struct.Struct("@hhqqi4x")  # struct flock on 64-bit Linux; l_pid must be 0 for OFD
_COPY_CHUNK_BYTES = 64 * 1024 * 1024


def _ofd_lock(fd: int, offset: int, *, blocking: bool) -> bool:
    request = _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, offset, 1, 0)
    try:
        fcntl.fcntl(fd, fcntl.F_OFD_SETLKW if blocking else fcntl.F_OFD_SETLK, request)
    except OSError as exc:
        if blocking or exc.errno not in (errno.EACCES, errno.EAGAIN):
            raise
        return False
    return True


def _ofd_unlock(fd: int, offset: int) -> None:
    fcntl.fcntl(fd, fcntl.F_OFD_SETLK, _FLOCK.pack(fcntl.F_UNLCK, os.SEEK_SET, offset, 1, 0))


class KeyLocks:
    """Per-(tenant, key) exclusive locks; keys are hex digests. Thread-safe."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._stripes = [threading.Lock() for _ in range(_STRIPES)]
        self._fds: dict[str, int] = {}

    def has_tenant(self, tenant: str) -> bool:
        with self._mutex:
            return tenant in self._fds

    def open_tenant(self, tenant: str, lock_path: Path) -> None:
        with self._mutex:
            if tenant not in self._fds:
                flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
                self._fds[tenant] = os.open(lock_path, flags, 0o600)

    @contextlib.contextmanager
    def hold(self, tenant: str, key: str, *, blocking: bool = True) -> Iterator[bool]:
        """Hold the key's lock; yields False when `blocking` is off and the lock is busy."""
        offset = int(key[:8], 16)
        stripe = self._stripes[offset % _STRIPES]  # one byte offset -> always one stripe
        if not stripe.acquire(blocking=blocking):
            yield False
            return
        try:
            with self._mutex:
                fd = self._fds[tenant]
            locked = _ofd_lock(fd, offset, blocking=blocking)
            try:
                yield locked
            finally:
                if locked:
                    _ofd_unlock(fd, offset)
        finally:
            stripe.release()

    def close(self) -> None:
        with self._mutex:
            fds, self._fds = list(self._fds.values()), {}
        for fd in fds:
            os.close(fd)


def copy_range(src_fd: int, dst_fd: int, offset: int, size_bytes: int) -> None:
    """Copy `size_bytes` of `src_fd` from `offset` to `dst_fd`'s position, in the kernel."""
    done = 0
    while done < size_bytes:
        count = min(size_bytes - done, _COPY_CHUNK_BYTES)
        try:
            sent = os.sendfile(dst_fd, src_fd, offset + done, count)
        except OSError as exc:
            if exc.errno not in (errno.EINVAL, errno.ENOSYS):
                raise
            chunk = os.pread(src_fd, count, offset + done)
            sent = os.write(dst_fd, chunk) if chunk else 0
        if sent == 0:
            raise EOFError(f"the source ended after {done} of {size_bytes} bytes")
        done += sent

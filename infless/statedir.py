"""One gateway per state directory, and what a gateway that died left there.

`claim_state_dir` takes an exclusive `flock` on `<state>/gateway.lock` for the life of the
process (the kernel drops it when the process dies, however it dies), so two gateways never
share a registry, a tensor store or run records. Holding it, the claim settles the previous
run: every process recorded in `<state>/run/` (`workers.records`) that still runs is
SIGKILLed, and the private directory of the previous gateway's internal socket is removed.
`StateClaim.release` does the same at a clean exit, then lets the lock go.

Gateway side: never imports torch; reads no clock. Errors are `StateError`s that name the
file and the fix (`infless serve` exits 2 with them).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
from pathlib import Path

from infless.errors import StateError
from infless.workers.records import Orphan, RunRecords

log = logging.getLogger(__name__)

LOCK_FILE = "gateway.lock"
RUN_DIR = "run"
PRIVATE_DIR_NOTE = "private-dir"  # in RUN_DIR: the internal socket's directory, to remove
PRIVATE_DIR_PREFIX = "infless-gateway-"


def run_records(state_dir: Path) -> RunRecords:
    return RunRecords(state_dir / RUN_DIR)


class StateClaim:
    """This process's hold on a state directory (see the module's docstring)."""

    def __init__(self, state_dir: Path, lock_fd: int, orphans: list[Orphan]) -> None:
        self.state_dir = state_dir
        self.orphans = orphans  # what the previous run left running, now killed
        self._lock_fd: int | None = lock_fd

    @property
    def records(self) -> RunRecords:
        return run_records(self.state_dir)

    def note_private_dir(self, directory: Path) -> None:
        """Remember the internal socket's directory (removed by the next claim if we die)."""
        with contextlib.suppress(OSError):
            (self.state_dir / RUN_DIR).mkdir(parents=True, exist_ok=True)
            (self.state_dir / RUN_DIR / PRIVATE_DIR_NOTE).write_text(str(directory))

    def release(self) -> list[Orphan]:
        """At a clean exit, after every worker was stopped: kill what is still recorded,
        clear the run directory, let the lock go. What it killed (nothing, normally)."""
        left = _settle(self.state_dir)
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # the lock goes with the descriptor
            self._lock_fd = None
        return left


def claim_state_dir(state_dir: Path) -> StateClaim:
    """Lock `state_dir` for this process and settle what a previous gateway left."""
    lock_path = state_dir / LOCK_FILE
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise StateError(f"{lock_path}: cannot open the state directory's lock ({exc})") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(lock_path)
        os.close(fd)
        raise StateError(
            f"{state_dir} is in use by another gateway{holder}: one gateway per state "
            "directory; stop that one, or give this one its own (--state-dir)"
        ) from None
    with contextlib.suppress(OSError):  # who holds it, for the message above
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    orphans = _settle(state_dir)
    for orphan in orphans:
        log.warning(
            "killed pid %d, a %s (%s) left running by the previous gateway",
            orphan.pid,
            orphan.role,
            orphan.label,
        )
    return StateClaim(state_dir, fd, orphans)


def _holder(lock_path: Path) -> str:
    with contextlib.suppress(OSError, ValueError):
        return f" (pid {int(lock_path.read_text().strip())})"
    return ""


def _settle(state_dir: Path) -> list[Orphan]:
    """Kill the recorded processes still running and remove the noted private directory."""
    orphans = run_records(state_dir).reap()
    note = state_dir / RUN_DIR / PRIVATE_DIR_NOTE
    with contextlib.suppress(OSError):
        private = Path(note.read_text().strip())
        if private.name.startswith(PRIVATE_DIR_PREFIX) and private.is_dir():
            shutil.rmtree(private, ignore_errors=True)
        note.unlink()
    return orphans

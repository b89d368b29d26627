"""Run records: a PID file for every process a gateway starts through its fork servers.

Those processes are the zygote, the templates and the workers. The next gateway on the same
state directory finds the ones a crash left behind and stops them: by recorded pid and start
time, never by name.

There is one file per process, `<directory>/<pid>`, holding `<start ticks> <role> <label>`.
The start time (field 22 of /proc/PID/stat, clock ticks since boot) tells a recorded process
from a later one that reuses its pid. A record is written when the process is forked. It is
removed when its exit is reported (the fork server's `ChildExited`, the zygote's wait). A
process whose parent died unreported keeps its record, and the next `reap` settles it.

`reap` must run only by the holder of the state directory's lock (`infless.statedir`). It
SIGKILLs every recorded process that still runs with its recorded start time, and removes
every record.

Gateway side: never imports torch, reads no clock. Writing a record is best effort: a full
disk costs the record (logged once), never the start.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

_START_TICKS_FIELD = 22  # /proc/PID/stat, 1-based
_DEAD_STATES = frozenset({"Z", "X"})  # zombie, dead


def start_ticks(pid: int) -> int | None:
    """When `pid` started (clock ticks since boot), or None when no such process runs (a
    zombie, dead and not yet reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()  # the name may hold spaces and ')'
    try:
        if fields[0] in _DEAD_STATES:
            return None
        return int(fields[_START_TICKS_FIELD - 3])  # fields[0] is field 3 (the state)
    except (IndexError, ValueError):
        return None


@dataclass(frozen=True, slots=True)
class Orphan:
    """A recorded process a previous gateway left running, and what it was."""

    pid: int
    role: str
    label: str


class RunRecords:
    """The PID files of one gateway's processes, in `directory` (created on first use)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._warned = False

    def add(self, pid: int, role: str, label: str) -> None:
        """Record a process just started (`role`: zygote, template, worker)."""
        ticks = start_ticks(pid)
        if ticks is None:
            return  # already gone: nothing to find later
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            (self.directory / str(pid)).write_text(f"{ticks} {role} {label}\n", encoding="utf-8")
        except OSError as exc:
            if not self._warned:  # a full state disk: say it once, keep starting workers
                self._warned = True
                log.warning("cannot record process %d in %s: %s", pid, self.directory, exc)

    def discard(self, pid: int) -> None:
        """The process exited (its parent reported it)."""
        with contextlib.suppress(OSError):
            (self.directory / str(pid)).unlink()

    def pids(self) -> list[int]:
        if not self.directory.is_dir():
            return []
        return sorted(int(p.name) for p in self.directory.iterdir() if p.name.isdigit())

    def reap(self) -> list[Orphan]:
        """SIGKILL every recorded process still running as recorded; remove every record."""
        orphans = []
        for pid in self.pids():
            record = self.directory / str(pid)
            with contextlib.suppress(OSError, ValueError):
                ticks, role, label = record.read_text(encoding="utf-8").split(" ", 2)
                if start_ticks(pid) == int(ticks):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                        orphans.append(Orphan(pid, role, label.strip()))
            with contextlib.suppress(OSError):
                record.unlink()
        return orphans

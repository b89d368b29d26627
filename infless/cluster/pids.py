"""Process-count limits of sandboxed workers (the cgroup pids controller), and their strays.

A worker of a tenant (and each per-model template) gets a pids group of its own with
`pids.max`. A fork bomb in a package then gets EAGAIN from fork and clone once the group
holds that many tasks (threads count); it never reaches the host's limit. `detect_pids`
finds where such groups may go (`cluster.controller`). `release` kills what is still in
the group, then removes the group it made: processes a package left behind would otherwise
outlive their worker.
Shell side: file I/O on /sys/fs/cgroup and /proc, no clock; never imports torch.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import signal
from dataclasses import dataclass
from pathlib import Path

from infless.clock import pause_s
from infless.cluster.controller import (
    CGROUP_ROOT,
    ControllerLayout,
    detect_controller,
    enable_v2,
    group_name,
    write,
)

log = logging.getLogger(__name__)

PidsLayout = ControllerLayout  # where pids groups go


def detect_pids(
    root: Path = CGROUP_ROOT, proc_cgroup: Path = Path("/proc/self/cgroup")
) -> PidsLayout:
    """Where this process can create pids-limited groups for its workers."""
    return detect_controller("pids", "cgroup.procs", root, proc_cgroup)


@dataclass(frozen=True, slots=True)
class PidsLimit:
    """A worker's pids group: where, how many tasks, and whether this limiter made it."""

    pid: int
    max_pids: int
    group: Path
    created: bool

    def describe(self) -> dict[str, object]:
        return {"pidsMax": self.max_pids, "group": str(self.group)}


def _pids_in(group: Path) -> list[int]:
    with contextlib.suppress(OSError, ValueError):
        return [int(p) for p in (group / "cgroup.procs").read_text().split()]
    return []


class PidsLimiter:
    """Creates, limits, empties and removes per-worker pids groups under `<root>/<parent>/`."""

    def __init__(self, layout: PidsLayout | None = None, parent: str = "infless") -> None:
        self.layout = layout if layout is not None else detect_pids()
        self.parent = group_name(parent)

    @property
    def unavailable(self) -> str | None:
        """Why no limit can be enforced here; None when it can."""
        if self.layout.version != "none":
            return None
        return self.layout.reason or "no cgroup pids controller"

    def limit(self, name: str, pid: int, max_pids: int) -> PidsLimit:
        """Put `pid` in a group of its own holding at most `max_pids` tasks; OSError when
        it cannot."""
        root = self.layout.root
        if self.layout.version == "none" or root is None:
            raise OSError(errno.ENOTSUP, f"pids limits unavailable: {self.layout.reason}")
        parent = root / self.parent
        group = parent / group_name(name)
        if self.layout.version == "v2":
            enable_v2("pids", root, parent)
        else:
            parent.mkdir(exist_ok=True)
        created = not group.is_dir()  # v2: else the worker's CPU group, shared
        if created:
            group.mkdir()
        try:
            write(group / "pids.max", str(max_pids))
            if created:
                write(group / "cgroup.procs", str(pid))
        except OSError:
            if created:
                self._empty_and_remove(group, root)
            raise
        return PidsLimit(pid, max_pids, group, created)

    def release(self, limit: PidsLimit) -> None:
        """The worker (`limit.pid`, when it lives on: a GPU worker going back to standby)
        moves out; what is left in the group — a package's strays — is killed; the group
        goes if this limiter made it."""
        root = self.layout.root
        if root is None:
            return
        if limit.pid in _pids_in(limit.group):
            with contextlib.suppress(OSError):
                write(root / "cgroup.procs", str(limit.pid))
        if limit.created:
            self._empty_and_remove(limit.group, root)
        else:
            self._kill_all(limit.group)

    def kill_strays(self, limit: PidsLimit, keep: int | None = None) -> int:
        """Kill every task in the worker's group but `keep` (the worker itself, when it is to
        exit on its own); how many there were."""
        return self._kill_all(limit.group, keep)

    @staticmethod
    def _kill_all(group: Path, keep: int | None = None) -> int:
        pids = [pid for pid in _pids_in(group) if pid != keep]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return len(pids)

    def _empty_and_remove(self, group: Path, root: Path) -> None:
        for attempt in range(100):
            self._kill_all(group)  # a fork bomb refills it: kill until nothing is left
            try:
                group.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError as exc:
                if exc.errno != errno.EBUSY or attempt == 99:
                    log.warning("could not remove pids cgroup %s: %s", group, exc)
                    return
                pause_s(0.01)  # killed tasks leave the group a moment later

    def remove_parent(self) -> None:
        """Remove the shared parent group if it is empty (at shutdown)."""
        if self.layout.root is None or self.layout.version == "v2":
            return  # v2: the parent is the CPU confiner's, removed by it
        with contextlib.suppress(FileNotFoundError):
            try:
                (self.layout.root / self.parent).rmdir()
            except OSError as exc:
                if exc.errno not in (errno.EBUSY, errno.ENOTEMPTY):
                    raise

"""Process-count limits of sandboxed workers (the cgroup pids controller, v1 or v2), and their
strays.

A worker of a tenant (and each per-model template) gets a pids group of its own with
`pids.max`: a fork bomb in a package gets EAGAIN from fork and clone once the group holds
that many tasks (threads count), and never reaches the host's limit. `detect_pids` finds
where this process may create such groups: on v1 the pids hierarchy at this process's own
pids group, on v2 the unified root (a v2 process is in one group only: the limit goes into
the worker's CPU group when there is one, as `cluster.memory` does). `release` kills what
is still in the group — processes a package left behind, which would otherwise outlive
its worker — then removes the group it made.
Shell side: file I/O on /sys/fs/cgroup and /proc, no clock; never imports torch.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from infless.clock import pause_s

log = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
_NAME = re.compile(r"[^A-Za-z0-9_.-]")


@dataclass(frozen=True, slots=True)
class PidsLayout:
    version: Literal["v1", "v2", "none"]
    root: Path | None = None  # v1: where the groups go; v2: the unified root
    reason: str = ""  # why process counts cannot be limited ("none")


def _own_group(proc_cgroup: Path) -> str:
    for line in proc_cgroup.read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "pids" in controllers.split(","):
            return path
    return "/"


def detect_pids(
    root: Path = CGROUP_ROOT, proc_cgroup: Path = Path("/proc/self/cgroup")
) -> PidsLayout:
    """Where this process can create pids-limited groups for its workers."""
    controllers = root / "cgroup.controllers"
    if controllers.is_file():
        subtree = root / "cgroup.subtree_control"
        if "pids" in controllers.read_text().split() and os.access(subtree, os.W_OK):
            return PidsLayout("v2", root)
        return PidsLayout("none", reason=f"cgroup v2 at {root} has no writable pids controller")
    hierarchy = root / "pids"
    if not (hierarchy / "cgroup.procs").is_file():
        return PidsLayout("none", reason=f"no cgroup v1 pids hierarchy at {hierarchy}")
    try:
        own = hierarchy / _own_group(proc_cgroup).lstrip("/")
    except (OSError, ValueError) as exc:
        return PidsLayout("none", reason=f"cannot read {proc_cgroup}: {exc}")
    if not os.access(own, os.W_OK):
        return PidsLayout("none", reason=f"the pids cgroup {own} is not writable")
    return PidsLayout("v1", own)


@dataclass(frozen=True, slots=True)
class PidsLimit:
    """A worker's pids group: where, how many tasks, and whether this limiter made it."""

    pid: int
    max_pids: int
    group: Path
    created: bool

    def describe(self) -> dict[str, object]:
        return {"pidsMax": self.max_pids, "group": str(self.group)}


def _write(path: Path, value: str) -> None:
    path.write_text(value)


def _pids_in(group: Path) -> list[int]:
    with contextlib.suppress(OSError, ValueError):
        return [int(p) for p in (group / "cgroup.procs").read_text().split()]
    return []


class PidsLimiter:
    """Creates, limits, empties and removes per-worker pids groups under `<root>/<parent>/`."""

    def __init__(self, layout: PidsLayout | None = None, parent: str = "infless") -> None:
        self.layout = layout if layout is not None else detect_pids()
        self.parent = _NAME.sub("_", parent)

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
        group = parent / _NAME.sub("_", name)
        if self.layout.version == "v2":
            if "pids" not in (root / "cgroup.subtree_control").read_text().split():
                _write(root / "cgroup.subtree_control", "+pids")
            parent.mkdir(exist_ok=True)
            _write(parent / "cgroup.subtree_control", "+pids")
        else:
            parent.mkdir(exist_ok=True)
        created = not group.is_dir()  # v2: else the worker's CPU group, shared
        if created:
            group.mkdir()
        try:
            _write(group / "pids.max", str(max_pids))
            if created:
                _write(group / "cgroup.procs", str(pid))
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
                _write(root / "cgroup.procs", str(limit.pid))
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

"""Memory limits of worker processes (the cgroup memory controller), and OOM kills.

`detect_memory` finds where memory groups may go (`cluster.controller`). `MemoryLimiter.limit`
writes the limit and moves the pid in: v1 `memory.limit_in_bytes` (and
`memory.memsw.limit_in_bytes` where swap is accounted), v2 `memory.max` (and
`memory.swap.max` 0). `oom_kills` reads how many tasks the kernel killed for the limit
(v1 `memory.oom_control`, v2 `memory.events`: `oom_kill`).
Shell side: file I/O on /sys/fs/cgroup and /proc, no clock; never imports torch.
"""

from __future__ import annotations

import contextlib
import errno
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

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

MemoryLayout = ControllerLayout  # where memory groups go


def format_mib(size_bytes: int) -> str:
    """134217728 -> '128 MiB'; 100000000 -> '95.4 MiB'."""
    return f"{size_bytes / 2**20:.1f}".removesuffix(".0") + " MiB"


def detect_memory(
    root: Path = CGROUP_ROOT, proc_cgroup: Path = Path("/proc/self/cgroup")
) -> MemoryLayout:
    """Where this process can create memory-limited groups for its workers."""
    return detect_controller("memory", "memory.limit_in_bytes", root, proc_cgroup)


@dataclass(frozen=True, slots=True)
class MemoryLimit:
    """A worker's memory group: where, how much, and whether this limiter made the group."""

    pid: int
    limit_bytes: int
    group: Path
    version: Literal["v1", "v2"]
    created: bool

    def describe(self) -> dict[str, object]:
        return {"limitBytes": self.limit_bytes, "group": str(self.group)}


def _counter(text: str, key: str) -> int:
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            return int(value)
    return 0


class MemoryLimiter:
    """Creates, limits and removes per-worker memory groups under `<root>/<parent>/`."""

    def __init__(self, layout: MemoryLayout | None = None, parent: str = "infless") -> None:
        self.layout = layout if layout is not None else detect_memory()
        self.parent = group_name(parent)

    @property
    def unavailable(self) -> str | None:
        """Why no limit can be enforced here; None when it can."""
        if self.layout.version != "none":
            return None
        return self.layout.reason or "no cgroup memory controller"

    def limit(self, name: str, pid: int, limit_bytes: int) -> MemoryLimit:
        """Put `pid` in a group of its own limited to `limit_bytes`; OSError when it cannot."""
        root = self.layout.root
        if self.layout.version == "none" or root is None:
            raise OSError(errno.ENOTSUP, f"memory limits unavailable: {self.layout.reason}")
        parent = root / self.parent
        group = parent / group_name(name)
        if self.layout.version == "v2":
            return self._limit_v2(root, parent, group, pid, limit_bytes)
        parent.mkdir(exist_ok=True)
        group.mkdir()
        try:
            write(group / "memory.limit_in_bytes", str(limit_bytes))
            if (group / "memory.memsw.limit_in_bytes").is_file():  # no swapping around it
                write(group / "memory.memsw.limit_in_bytes", str(limit_bytes))
            write(group / "cgroup.procs", str(pid))
        except OSError:
            self._remove(group, root)
            raise
        return MemoryLimit(pid, limit_bytes, group, "v1", created=True)

    def _limit_v2(
        self, root: Path, parent: Path, group: Path, pid: int, limit_bytes: int
    ) -> MemoryLimit:
        enable_v2("memory", root, parent)
        created = not group.is_dir()  # else CpuConfiner's group for this worker: share it
        if created:
            group.mkdir()
        try:
            write(group / "memory.max", str(limit_bytes))
            if (group / "memory.swap.max").is_file():
                write(group / "memory.swap.max", "0")
            if created:
                write(group / "cgroup.procs", str(pid))
        except OSError:
            if created:
                self._remove(group, root)
            raise
        return MemoryLimit(pid, limit_bytes, group, "v2", created)

    def oom_kills(self, limit: MemoryLimit) -> int:
        """Tasks the kernel killed in the group for its limit (0 when it cannot tell)."""
        events = "memory.oom_control" if limit.version == "v1" else "memory.events"
        try:
            return _counter((limit.group / events).read_text(), "oom_kill")
        except (OSError, ValueError):
            return 0

    def release(self, limit: MemoryLimit) -> None:
        """Remove the group this limiter made (processes still inside move out first)."""
        if limit.created and self.layout.root is not None:
            self._remove(limit.group, self.layout.root)

    def _remove(self, group: Path, root: Path) -> None:
        for attempt in range(50):
            with contextlib.suppress(OSError):
                for pid in (group / "cgroup.procs").read_text().split():
                    with contextlib.suppress(OSError):
                        write(root / "cgroup.procs", pid)
            try:
                group.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError as exc:
                if exc.errno != errno.EBUSY or attempt == 49:
                    log.warning("could not remove memory cgroup %s: %s", group, exc)
                    return
                pause_s(0.01)  # an exiting task leaves its group a moment later

    def remove_parent(self) -> None:
        """Remove the shared parent group if it is empty (at shutdown)."""
        if self.layout.root is None:
            return
        with contextlib.suppress(FileNotFoundError):
            try:
                (self.layout.root / self.parent).rmdir()
            except OSError as exc:
                if exc.errno not in (errno.EBUSY, errno.ENOTEMPTY):
                    raise

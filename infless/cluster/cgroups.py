"""Real CPU confinement of a worker process: cgroups (cpuset + CPU quota), else CPU affinity.

`detect_layout` finds a writable cgroup v2 tree (`cgroup.controllers` with cpu and cpuset at
the root) or writable v1 `cpuset` and `cpu` hierarchies. `CpuConfiner.confine` creates one
group per instance under a shared parent (`infless/<instance>`), writes its cpuset
(`cpuset.cpus`, `cpuset.mems`) and quota (v1 `cpu.cfs_quota_us`/`cpu.cfs_period_us`, v2
`cpu.max`, cores × period), and moves the pid in (`cgroup.procs`: every thread). The shared
parent gets the CPU weight of the workers' niceness (v1 `cpu.shares`, v2 `cpu.weight`): the
kernel schedules groups before the tasks inside them, so a worker's own niceness counts only
against its group's siblings, and without it the parent competes with the gateway as an
equal — or, with a weight left high by someone else, far ahead of it. When no
cgroup is writable, or writing fails, it falls back to `sched_setaffinity` on every thread
of the pid. `release` moves any remaining process out and removes the group; `Confinement`
reports what was applied, for `/system/instances`.

Shell side: file I/O on /sys/fs/cgroup and /proc, no clock; never imports torch.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from infless.clock import pause_s

log = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
DEFAULT_PERIOD_US = 100_000
Method = Literal["cgroup-v1", "cgroup-v2", "affinity"]
_NAME = re.compile(r"[^A-Za-z0-9_.-]")
# the kernel's CFS load weight of a task at nice 0..19 (`sched_prio_to_weight`)
_NICE_WEIGHT: tuple[int, ...] = (1024, 820, 655, 526, 423, 335, 272, 215, 172, 137)
_NICE_WEIGHT += (110, 87, 70, 56, 45, 36, 29, 23, 18, 15)
V2_DEFAULT_WEIGHT = 100  # cgroup v2's `cpu.weight` of a group at nice 0


def nice_weight(nice: int) -> int:
    """The CFS weight of a task at `nice` (0..19): 1024 at 0, 110 at 10."""
    if not 0 <= nice < len(_NICE_WEIGHT):
        raise ValueError(f"nice = {nice}: must be 0..{len(_NICE_WEIGHT) - 1}")
    return _NICE_WEIGHT[nice]


def v2_weight(nice: int) -> int:
    """cgroup v2's `cpu.weight` for a group as heavy as a task at `nice` (100 at 0)."""
    return max(1, round(nice_weight(nice) * V2_DEFAULT_WEIGHT / _NICE_WEIGHT[0]))


def format_cpu_list(cpus: Iterable[int]) -> str:
    """`[0, 1, 2, 5]` -> `"0-2,5"` (the kernel's list format)."""
    ordered = sorted(set(cpus))
    parts: list[str] = []
    start = prev = None
    for cpu in [*ordered, None]:
        if cpu is not None and prev is not None and cpu == prev + 1:
            prev = cpu
            continue
        if start is not None and prev is not None:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = cpu
    return ",".join(parts)


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """`"0-2,5"` -> `(0, 1, 2, 5)`; empty text -> `()`."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    return tuple(sorted(cpus))


def allowed_cpus(pid: int) -> tuple[int, ...]:
    """The CPUs a process may run on (its `Cpus_allowed_list` in /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return parse_cpu_list(line.split(":", 1)[1])
    raise LookupError(f"/proc/{pid}/status has no Cpus_allowed_list")


@dataclass(frozen=True, slots=True)
class CgroupLayout:
    version: Literal["v1", "v2", "none"]
    cpuset_root: Path | None = None  # v1: the cpuset hierarchy; v2: the unified root
    cpu_root: Path | None = None  # v1: the cpu hierarchy; v2: the unified root
    reason: str = ""  # why no cgroup can be used ("none")


def _writable(path: Path) -> bool:
    return path.exists() and os.access(path, os.W_OK)


def detect_layout(root: Path = CGROUP_ROOT) -> CgroupLayout:
    """Which cgroup interface this process can use to confine workers."""
    controllers = root / "cgroup.controllers"
    if controllers.is_file():
        available = set(controllers.read_text().split())
        if {"cpu", "cpuset"} <= available and _writable(root / "cgroup.subtree_control"):
            return CgroupLayout("v2", root, root)
        return CgroupLayout("none", reason=f"cgroup v2 at {root} lacks writable cpu/cpuset")
    cpuset = root / "cpuset"
    cpu = next(
        (root / n for n in ("cpu", "cpu,cpuacct", "cpuacct,cpu") if (root / n).is_dir()), None
    )
    if (
        cpu is not None
        and (cpuset / "cpuset.cpus").is_file()
        and (cpu / "cpu.cfs_quota_us").is_file()
        and _writable(cpuset)
        and _writable(cpu)
    ):
        return CgroupLayout("v1", cpuset, cpu)
    return CgroupLayout("none", reason=f"no writable cgroup v1 cpuset+cpu or v2 tree at {root}")


@dataclass(frozen=True, slots=True)
class Confinement:
    """What was applied to one instance's worker."""

    instance_id: str
    pid: int
    method: Method
    cpus: tuple[int, ...]
    quota_us: int | None = None
    period_us: int | None = None
    groups: tuple[str, ...] = ()  # the cgroup directories created for it
    note: str = ""  # why a fallback was taken

    def describe(self) -> dict[str, object]:
        """The `/system/instances` view: method, cpuset, quota."""
        cores = (
            None if self.quota_us is None or not self.period_us else self.quota_us / self.period_us
        )
        return {
            "method": self.method,
            "cpuset": format_cpu_list(self.cpus),
            "cpu_quota_us": self.quota_us,
            "cpu_period_us": self.period_us,
            "cpu_quota_cores": cores,
            "note": self.note,
        }


def _write(path: Path, value: str) -> None:
    path.write_text(value)


def _pids_in(group: Path) -> list[int]:
    with contextlib.suppress(OSError):
        return [int(p) for p in (group / "cgroup.procs").read_text().split()]
    return []


class CpuConfiner:
    """Creates, fills and removes per-instance groups under `<root>/<parent>/`."""

    def __init__(
        self,
        layout: CgroupLayout | None = None,
        parent: str = "infless",
        period_us: int = DEFAULT_PERIOD_US,
        nice: int = 0,
    ) -> None:
        self.layout = layout if layout is not None else detect_layout()
        self.parent = _NAME.sub("_", parent)
        self.period_us = period_us
        self.nice = nice  # the parent group weighs as much as a task at this niceness
        nice_weight(nice)  # a bad value fails here, not at the first start

    # -- confine --------------------------------------------------------------------------
    def confine(
        self, instance_id: str, pid: int, cpus: Sequence[int], cores: float | None = None
    ) -> Confinement:
        """Confine `pid` to `cpus` with a quota of `cores` (default: len(cpus)) CPUs."""
        if not cpus:
            raise ValueError(f"instance {instance_id!r}: confine needs at least one CPU")
        cpu_set = tuple(sorted(set(cpus)))
        quota_us = round((cores if cores is not None else len(cpu_set)) * self.period_us)
        if quota_us <= 0:
            raise ValueError(f"instance {instance_id!r}: cores = {cores} must be > 0")
        name = _NAME.sub("_", instance_id)
        layout = self.layout
        note = layout.reason
        if layout.version != "none":
            created: list[Path] = []
            try:
                if layout.version == "v1":
                    self._confine_v1(name, pid, cpu_set, quota_us, created)
                else:
                    self._confine_v2(name, pid, cpu_set, quota_us, created)
            except OSError as exc:
                note = f"cgroup {layout.version} failed ({exc}); fell back to CPU affinity"
                log.warning("instance %s: %s", instance_id, note)
                self._remove(created)
            else:
                return Confinement(
                    instance_id=instance_id,
                    pid=pid,
                    method="cgroup-v1" if layout.version == "v1" else "cgroup-v2",
                    cpus=cpu_set,
                    quota_us=quota_us,
                    period_us=self.period_us,
                    groups=tuple(str(p) for p in created),
                )
        set_affinity(pid, cpu_set)
        return Confinement(instance_id, pid, "affinity", cpu_set, note=note)

    def _confine_v1(
        self, name: str, pid: int, cpus: tuple[int, ...], quota_us: int, created: list[Path]
    ) -> None:
        cpuset_root, cpu_root = self.layout.cpuset_root, self.layout.cpu_root
        assert cpuset_root is not None
        assert cpu_root is not None
        parent = cpuset_root / self.parent
        if not parent.is_dir():
            parent.mkdir()
        for key in ("cpuset.cpus", "cpuset.mems"):  # a new cpuset starts empty: inherit
            if not (parent / key).read_text().strip():
                _write(parent / key, (cpuset_root / key).read_text().strip())
        offered = parse_cpu_list((parent / "cpuset.cpus").read_text())
        missing = sorted(set(cpus) - set(offered))
        if missing:
            raise OSError(errno.EINVAL, f"CPUs {missing} are not in {parent}/cpuset.cpus")
        group = parent / name
        group.mkdir()
        created.append(group)
        _write(group / "cpuset.mems", (parent / "cpuset.mems").read_text().strip())
        _write(group / "cpuset.cpus", format_cpu_list(cpus))
        cpu_parent = cpu_root / self.parent
        if not cpu_parent.is_dir():
            cpu_parent.mkdir()
        _write(cpu_parent / "cpu.shares", str(nice_weight(self.nice)))
        cpu_group = cpu_parent / name
        cpu_group.mkdir()
        created.append(cpu_group)
        _write(cpu_group / "cpu.cfs_period_us", str(self.period_us))
        _write(cpu_group / "cpu.cfs_quota_us", str(quota_us))
        _write(group / "cgroup.procs", str(pid))
        _write(cpu_group / "cgroup.procs", str(pid))

    def _confine_v2(
        self, name: str, pid: int, cpus: tuple[int, ...], quota_us: int, created: list[Path]
    ) -> None:
        root = self.layout.cpuset_root
        assert root is not None
        if not {"cpu", "cpuset"} <= set((root / "cgroup.subtree_control").read_text().split()):
            _write(root / "cgroup.subtree_control", "+cpu +cpuset")
        parent = root / self.parent
        if not parent.is_dir():
            parent.mkdir()
        _write(parent / "cgroup.subtree_control", "+cpu +cpuset")
        _write(parent / "cpu.weight", str(v2_weight(self.nice)))
        group = parent / name
        group.mkdir()
        created.append(group)
        _write(group / "cpuset.cpus", format_cpu_list(cpus))
        _write(group / "cpu.max", f"{quota_us} {self.period_us}")
        _write(group / "cgroup.procs", str(pid))

    # -- release --------------------------------------------------------------------------
    def release(self, confinement: Confinement) -> None:
        """Remove the instance's groups (processes still inside move to the root first)."""
        self._remove([Path(p) for p in confinement.groups])

    def _remove(self, groups: Sequence[Path]) -> None:
        for group in reversed(groups):
            root = self._root_of(group)
            for attempt in range(50):
                for pid in _pids_in(group):
                    with contextlib.suppress(OSError):
                        _write(root / "cgroup.procs", str(pid))
                try:
                    group.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as exc:
                    if exc.errno != errno.EBUSY or attempt == 49:
                        log.warning("could not remove cgroup %s: %s", group, exc)
                        break
                    pause_s(0.01)  # an exiting task leaves its group a moment later

    def _root_of(self, group: Path) -> Path:
        for root in (self.layout.cpuset_root, self.layout.cpu_root):
            if root is not None and group.is_relative_to(root):
                return root
        return group.parent.parent

    def remove_parent(self) -> None:
        """Remove the shared parent groups if they are empty (at shutdown)."""
        roots = {r for r in (self.layout.cpuset_root, self.layout.cpu_root) if r is not None}
        for root in roots:
            with contextlib.suppress(FileNotFoundError):
                try:
                    (root / self.parent).rmdir()
                except OSError as exc:
                    if exc.errno not in (errno.EBUSY, errno.ENOTEMPTY):
                        raise


def set_affinity(pid: int, cpus: Sequence[int]) -> None:
    """Pin every thread of `pid` to `cpus` (threads started later inherit it)."""
    tasks = Path(f"/proc/{pid}/task")
    tids = [int(t.name) for t in tasks.iterdir()] if tasks.is_dir() else [pid]
    for tid in tids:
        with contextlib.suppress(ProcessLookupError):  # a thread that just exited
            os.sched_setaffinity(tid, cpus)
    if pid not in tids:
        os.sched_setaffinity(pid, cpus)

"""Where this process may make cgroups of one controller (pids or memory), v1 or v2.

Owns the detection and the group plumbing that the per-worker limiters share
(`cluster.pids`, `cluster.memory`). On v1 the groups go under this process's own group of
that controller's hierarchy, so workers stay inside whatever limits and accounting the
gateway itself is under. On v2 they go under the unified root, where `CpuConfiner` makes
its groups: a v2 process is in one group only, so a limit goes into the worker's CPU group
when there is one.

It must not decide a limit, move a worker or kill anything: the limiters do.
Shell side: file I/O on /sys/fs/cgroup and /proc, no clock; never imports torch.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

CGROUP_ROOT = Path("/sys/fs/cgroup")
_NAME = re.compile(r"[^A-Za-z0-9_.-]")


@dataclass(frozen=True, slots=True)
class ControllerLayout:
    """Where one controller's groups go."""

    version: Literal["v1", "v2", "none"]
    root: Path | None = None  # v1: where the groups go; v2: the unified root
    reason: str = ""  # why this controller cannot be used ("none")


def group_name(name: str) -> str:
    """`name` as a cgroup directory name: anything but letters, digits, `_.-` becomes `_`."""
    return _NAME.sub("_", name)


def write(path: Path, value: str) -> None:
    path.write_text(value)


def _writable(path: Path) -> bool:
    return path.exists() and os.access(path, os.W_OK)


def _own_group(controller: str, proc_cgroup: Path) -> str:
    """This process's group path for `controller` (`/` when it is in none)."""
    for line in proc_cgroup.read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return path
    return "/"


def detect_controller(
    controller: str, v1_file: str, root: Path, proc_cgroup: Path
) -> ControllerLayout:
    """Where this process can create `controller` groups for its workers.

    `v1_file` is a file every v1 group of the controller holds: the hierarchy's root and
    this process's own group must both have it.
    """
    controllers = root / "cgroup.controllers"
    if controllers.is_file():
        subtree = root / "cgroup.subtree_control"
        if controller in controllers.read_text().split() and _writable(subtree):
            return ControllerLayout("v2", root)
        reason = f"cgroup v2 at {root} has no writable {controller} controller"
        return ControllerLayout("none", reason=reason)
    hierarchy = root / controller
    if not (hierarchy / v1_file).is_file():
        reason = f"no cgroup v1 {controller} hierarchy at {hierarchy}"
        return ControllerLayout("none", reason=reason)
    try:
        own = hierarchy / _own_group(controller, proc_cgroup).lstrip("/")
    except (OSError, ValueError) as exc:
        return ControllerLayout("none", reason=f"cannot read {proc_cgroup}: {exc}")
    if not (own / v1_file).is_file() or not _writable(own):
        return ControllerLayout("none", reason=f"the {controller} cgroup {own} is not writable")
    return ControllerLayout("v1", own)


def enable_v2(controller: str, root: Path, parent: Path) -> None:
    """Let `parent` (made here if missing) and its children use `controller` on v2."""
    if controller not in (root / "cgroup.subtree_control").read_text().split():
        write(root / "cgroup.subtree_control", f"+{controller}")
    parent.mkdir(exist_ok=True)
    write(parent / "cgroup.subtree_control", f"+{controller}")

"""What the soak (`bench.soak`) measures over time, and whether it grew.

A **sample** is taken every few seconds: every process of the gateway's tree — the gateway,
its workers, the models' templates and the helpers (zygote, fork servers), told apart by
the pids `/system/instances` and `/system/templates` report — with its resident memory and
open file descriptors, and the tensor store's files and bytes on tmpfs. What is deployed
changes on purpose (the churn function comes and goes), so growth is read on the **quiet**
samples: those taken at the same point of every churn cycle, just before it deploys again.
**Growth** compares the late part of such a series with its early part, after a warm-up
share is left out (instances starting, templates forming): the medians of the first and last
thirds of what remains, and the least-squares slope per hour. The baseline is the run's own
start.
`growth` and `window_counts` are pure; `sample_tree` and `store_size` read /proc and the
store's directory.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

ROLES = ("gateway", "worker", "template", "helper")
MIB = 1024.0 * 1024.0


@dataclass(frozen=True, slots=True)
class Sample:
    at_s: float
    rss_mib: dict[str, float]  # by role: summed over its processes
    fds: dict[str, int]  # by role: summed over its processes
    processes: dict[str, int]  # by role
    store_files: int
    store_mib: float
    workers_rss_mib: list[float] = field(default_factory=list)  # each worker's own
    quiet: bool = False  # taken at the same point of every churn cycle (its function removed)


def sample_tree(
    at_s: float,
    gateway_pid: int,
    worker_pids: set[int],
    template_pids: set[int],
    store: Path,
    quiet: bool = False,
) -> Sample:
    """One sample of the gateway's process tree and its tensor store; a process neither
    the gateway, a ready worker nor a template is a helper (the zygote, a fork server, a
    worker still starting)."""
    rss = dict.fromkeys(ROLES, 0.0)
    fds = dict.fromkeys(ROLES, 0)
    count = dict.fromkeys(ROLES, 0)
    workers: list[float] = []
    try:
        root = psutil.Process(gateway_pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        tree = []
    for process in tree:
        pid = process.pid
        if pid == gateway_pid:
            role = "gateway"
        elif pid in worker_pids:
            role = "worker"
        elif pid in template_pids:
            role = "template"
        else:
            role = "helper"
        try:
            resident_mib = process.memory_info().rss / MIB
            open_fds = process.num_fds()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue  # gone between the listing and the reading
        rss[role] += resident_mib
        fds[role] += open_fds
        count[role] += 1
        if role == "worker":
            workers.append(resident_mib)
    files, size_bytes = store_size(store)
    return Sample(
        at_s=at_s,
        rss_mib=rss,
        fds=fds,
        processes=count,
        store_files=files,
        store_mib=size_bytes / MIB,
        workers_rss_mib=workers,
        quiet=quiet,
    )


def store_size(root: Path) -> tuple[int, int]:
    """Files and bytes under the tensor store's root (0, 0 when it does not exist)."""
    files = total = 0
    for directory, _, names in os.walk(root):
        for name in names:
            try:
                total += (Path(directory) / name).stat().st_size
            except FileNotFoundError:
                continue  # reclaimed while walking
            files += 1
    return files, total


@dataclass(frozen=True, slots=True)
class Growth:
    early: float  # median of the first third after the warm-up
    late: float  # median of the last third
    change_pct: float
    slope_per_h: float

    def describe(self, digits: int = 2) -> dict[str, float]:
        return {
            "early": round(self.early, digits),
            "late": round(self.late, digits),
            "change_pct": round(self.change_pct, 1),
            "slope_per_h": round(self.slope_per_h, digits),
        }


def growth(points: Sequence[tuple[float, float]], warmup_share: float = 0.2) -> Growth:
    """How a series (time s, value) moved: see the module docstring."""
    if not points:
        return Growth(0.0, 0.0, 0.0, 0.0)
    kept = list(points[int(len(points) * warmup_share) :]) or list(points)
    third = max(1, len(kept) // 3)
    early = statistics.median(v for _, v in kept[:third])
    late = statistics.median(v for _, v in kept[-third:])
    change_pct = 0.0 if early == 0 else (late - early) / abs(early) * 100.0
    return Growth(early, late, change_pct, _slope(kept) * 3600.0)


def _slope(points: Sequence[tuple[float, float]]) -> float:
    if len(points) < 2:
        return 0.0
    mean_t = statistics.fmean(t for t, _ in points)
    mean_v = statistics.fmean(v for _, v in points)
    spread = sum((t - mean_t) ** 2 for t, _ in points)
    if spread == 0:
        return 0.0
    return sum((t - mean_t) * (v - mean_v) for t, v in points) / spread


def window_counts(
    outcomes: Iterable[tuple[float, int]], window_s: float
) -> list[tuple[float, dict[str, int]]]:
    """Requests per window of `window_s` by what they got (200, 429, error: anything
    else, a dropped connection included), from (send time s, status)."""
    windows: dict[int, dict[str, int]] = {}
    for at_s, status in outcomes:
        kind = "ok" if status == 200 else "rejected" if status == 429 else "error"
        bucket = windows.setdefault(int(at_s // window_s), {"ok": 0, "rejected": 0, "error": 0})
        bucket[kind] += 1
    return [(k * window_s, windows[k]) for k in sorted(windows)]

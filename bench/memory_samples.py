"""What `bench.memory` measures of one gateway, and how it reads it from /proc.

Owns the records (`ProcessMemory`, `Sample`, `ModeRun`) and the /proc readers: a process's
Pss (`smaps_rollup`), the Pss of its mappings of store files (`smaps`), a tmpfs tree's
resident bytes, the machine's available memory. It also checks, after a gateway stopped,
that none of its processes outlived it. It must not start a gateway: `bench.memory` does.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

MIB = 1024 * 1024
KIB = 1024


@dataclass(frozen=True, slots=True)
class ProcessMemory:
    pid: int
    pss_bytes: int
    pss_anon_bytes: int
    pss_file_bytes: int
    pss_shmem_bytes: int
    store_mapped_pss_bytes: int  # Pss of this process's mappings of files under the store root


def _kib_fields(text: str) -> dict[str, int]:
    fields: dict[str, int] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if len(parts) == 2 and parts[1] == "kB":
            fields[name] = int(parts[0])
    return fields


def store_mapped_pss_bytes(pid: int, store_root: Path | None) -> int:
    """Sum of Pss over the process's mappings whose file lies under `store_root`."""
    if store_root is None:
        return 0
    prefix = str(store_root) + "/"
    total_kib = 0
    in_store = False
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split(maxsplit=5)
        if head and "-" in head[0] and len(head) >= 5 and ":" not in head[0]:
            in_store = len(head) == 6 and head[5].startswith(prefix)
        elif in_store and line.startswith("Pss:"):
            total_kib += int(line.split()[1])
    return total_kib * KIB


def read_process_memory(pid: int, store_root: Path | None) -> ProcessMemory:
    fields = _kib_fields(Path(f"/proc/{pid}/smaps_rollup").read_text())
    return ProcessMemory(
        pid=pid,
        pss_bytes=fields["Pss"] * KIB,
        pss_anon_bytes=fields.get("Pss_Anon", 0) * KIB,
        pss_file_bytes=fields.get("Pss_File", 0) * KIB,
        pss_shmem_bytes=fields.get("Pss_Shmem", 0) * KIB,
        store_mapped_pss_bytes=store_mapped_pss_bytes(pid, store_root),
    )


def tmpfs_resident_bytes(root: Path) -> int:
    """Bytes allocated to the regular files under `root` (tmpfs: resident in memory)."""
    total = 0
    for directory, _, files in os.walk(root):
        for name in files:
            with contextlib.suppress(FileNotFoundError):
                info = (Path(directory) / name).lstat()
                total += info.st_blocks * 512
    return total


def mem_available_bytes() -> int:
    return _kib_fields(Path("/proc/meminfo").read_text())["MemAvailable"] * KIB


@dataclass(frozen=True, slots=True)
class Sample:
    mode: str
    instances: int  # per function
    workers: tuple[ProcessMemory, ...]
    zygote_pss_bytes: int
    store_bytes: int
    templates: tuple[ProcessMemory, ...] = ()

    @property
    def workers_pss_bytes(self) -> int:
        return sum(w.pss_bytes for w in self.workers)

    @property
    def templates_pss_bytes(self) -> int:
        return sum(t.pss_bytes for t in self.templates)

    @property
    def total_bytes(self) -> int:
        """The acceptance metric: workers' and templates' Pss + the store's tmpfs bytes."""
        return self.workers_pss_bytes + self.templates_pss_bytes + self.store_bytes

    @property
    def dedup_bytes(self) -> int:
        """Physical memory: store pages counted once (not also in the processes' Pss)."""
        mapped = sum(w.store_mapped_pss_bytes for w in (*self.workers, *self.templates))
        return self.total_bytes - mapped


@dataclass
class ModeRun:
    mode: str
    samples: dict[int, Sample] = field(default_factory=dict)
    skipped: dict[int, str] = field(default_factory=dict)
    pids_seen: set[int] = field(default_factory=set)


def reap_survivors(pids: set[int]) -> None:
    """Workers end on EOF of their socket and the zygote with the gateway; check, by pid."""
    deadline = time.monotonic() + 10.0
    alive = set(pids)
    while alive and time.monotonic() < deadline:
        alive = {pid for pid in alive if psutil.pid_exists(pid) and not _is_zombie(pid)}
        if alive:
            time.sleep(0.2)
    for pid in alive:
        print(f"  warning: pid {pid} outlived its gateway; sending SIGKILL", flush=True)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _is_zombie(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True

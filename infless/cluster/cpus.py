"""CPU core allocation for instances on this server: least-loaded cores first.

Instances may share cores when there are more instances than cores (the OS time-slices
them); the allocator spreads them so no core carries two instances while another is idle.
Pure bookkeeping: applying the set (affinity / cgroups) happens in the worker and pool.
"""

from __future__ import annotations

import os


def usable_cpus(reserved: int) -> tuple[int, ...]:
    """Cores this process may use, minus `reserved` kept for the gateway (at least one left)."""
    cores = sorted(os.sched_getaffinity(0))
    keep = max(1, len(cores) - max(0, reserved))
    return tuple(cores[len(cores) - keep :])


class CpuAllocator:
    def __init__(self, cores: tuple[int, ...]) -> None:
        if not cores:
            raise ValueError("a CpuAllocator needs at least one core")
        self.cores = cores
        self._load = dict.fromkeys(cores, 0)

    def assign(self, count: int) -> tuple[int, ...]:
        count = max(1, min(count, len(self.cores)))
        chosen = sorted(self.cores, key=lambda core: (self._load[core], core))[:count]
        for core in chosen:
            self._load[core] += 1
        return tuple(sorted(chosen))

    def release(self, cores: tuple[int, ...]) -> None:
        for core in cores:
            if self._load.get(core, 0) > 0:
                self._load[core] -= 1

    def load(self) -> dict[int, int]:
        return dict(self._load)

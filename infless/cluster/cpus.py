"""CPU cores of this server: allocation for instances (least-loaded cores first) and how busy
they are.

Instances may share cores when there are more instances than cores (the OS time-slices
them); the allocator spreads them so no core carries two instances while another is idle.
`CpuAllocator` is pure bookkeeping (applying the set — affinity, cgroups — happens in the
worker and pool); `HostCpu` reads the kernel's counters.
"""

from __future__ import annotations

import os

import psutil


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


class HostCpu:
    """How busy this server's cores were lately: read from the kernel's CPU counters at each
    `sample`, smoothed over the last few (an I/O shell for the autoscaler's snapshot)."""

    def __init__(self, cores: tuple[int, ...]) -> None:
        self._cores = cores
        self._last = self._read()
        self.busy: float | None = None

    def _read(self) -> tuple[float, float]:
        per_core = psutil.cpu_times(percpu=True)
        busy = total = 0.0
        for core in self._cores:
            if core < len(per_core):
                times = per_core[core]
                core_total = sum(times)
                total += core_total
                busy += core_total - times.idle - getattr(times, "iowait", 0.0)
        return busy, total

    def sample(self) -> float | None:
        """The share of the cores busy since the previous sample (smoothed); None at first."""
        busy, total = self._read()
        d_busy, d_total = busy - self._last[0], total - self._last[1]
        if d_total >= 0.05 * len(self._cores):  # enough ticks of the kernel's clock
            fraction = min(1.0, max(0.0, d_busy / d_total))
            self.busy = fraction if self.busy is None else 0.5 * (self.busy + fraction)
            self._last = (busy, total)
        return self.busy

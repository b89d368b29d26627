"""CPU core allocation for instances on this server: least-loaded cores first.

Instances may share cores when there are more instances than cores (the OS time-slices
them); the allocator spreads them so no core carries two instances while another is idle.

An instance that is let go (`retire`) keeps running on its cores until it has answered
what it queued, but those cores are the first a new instance gets after the idle ones:
an instance started in the pass that stops another (model-less vertical scaling hands a
retired variant's core to the new target) takes the stopping one's core, not a core that
stays busy. Without that, the new instance tied with a live one on the lowest-numbered
core while the stopping one's core went idle, and the planner — which counts cores held,
not which — saw no free core: a whole peak ran on one of two cores.

Pure bookkeeping: applying the set (affinity / cgroups) happens in the worker and pool.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


def usable_cpus(reserved: int) -> tuple[int, ...]:
    """Cores this process may use, minus `reserved` kept for the gateway (at least one left)."""
    cores = sorted(os.sched_getaffinity(0))
    keep = max(1, len(cores) - max(0, reserved))
    return tuple(cores[len(cores) - keep :])


@dataclass(slots=True)
class _Held:
    cores: tuple[int, ...]
    retired: bool = False


class CpuAllocator:
    """The cores of one server, each instance's (by `owner`, its worker id) and how many
    instances run on each core."""

    def __init__(self, cores: tuple[int, ...]) -> None:
        if not cores:
            raise ValueError("a CpuAllocator needs at least one core")
        self.cores = cores
        self._load = dict.fromkeys(cores, 0)  # instances on the core, retiring ones too
        self._retiring = dict.fromkeys(cores, 0)  # ... of which let go, still draining
        self._held: dict[str, _Held] = {}

    def assign(self, count: int, owner: str) -> tuple[int, ...]:
        """`count` cores for `owner`: idle cores first, then those whose instances are all
        retiring, then the least loaded."""
        self.release(owner)  # an owner holds one set at a time
        count = max(1, min(count, len(self.cores)))
        load, retiring = self._load, self._retiring
        chosen = tuple(
            sorted(
                sorted(self.cores, key=lambda c: (load[c] - retiring[c], retiring[c], c))[:count]
            )
        )
        for core in chosen:
            load[core] += 1
        self._held[owner] = _Held(chosen)
        return chosen

    def retire(self, owner: str) -> None:
        """`owner` is let go: it drains on its cores, which the next `assign` prefers to any
        core with a live instance."""
        held = self._held.get(owner)
        if held is None or held.retired:
            return
        held.retired = True
        for core in held.cores:
            self._retiring[core] += 1

    def release(self, owner: str) -> None:
        """`owner` no longer runs (a second release is a no-op)."""
        held = self._held.pop(owner, None)
        if held is None:
            return
        for core in held.cores:
            self._load[core] -= 1
            if held.retired:
                self._retiring[core] -= 1

    def load(self) -> dict[int, int]:
        """Instances running on each core (retiring ones included)."""
        return dict(self._load)

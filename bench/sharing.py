"""What the other tenants of this machine use while a benchmark runs: their CPU time.

The development machines are shared, so a benchmark's figures move with someone else's load.
`other_cpu_s` snapshots the CPU seconds of every process outside this process's tree (the
gateways and workers a bench starts are inside it); two snapshots give the cores others used
in between. Reads /proc through psutil; changes nothing.
"""

from __future__ import annotations

import psutil


def _tree_pids() -> set[int]:
    me = psutil.Process()
    pids = {me.pid}
    for child in me.children(recursive=True):
        pids.add(child.pid)
    return pids


def other_cpu_s() -> dict[int, float]:
    """CPU seconds so far of every process outside this bench's tree (the gateway and its
    workers are inside it), by pid: the other tenants of this machine."""
    ours = _tree_pids()
    times: dict[int, float] = {}
    for proc in psutil.process_iter(["cpu_times"]):
        cpu = proc.info["cpu_times"]
        if proc.pid not in ours and cpu is not None:
            times[proc.pid] = float(cpu.user + cpu.system)
    return times


def other_cpu_cores(before: dict[int, float], after: dict[int, float], seconds: float) -> float:
    """Mean cores used by others between two snapshots (a process born in between counts in
    full, one that died in between is missed, a reused pid is undercounted)."""
    used_s = sum(max(0.0, t - before.get(pid, 0.0)) for pid, t in after.items())
    return used_s / seconds if seconds > 0 else 0.0

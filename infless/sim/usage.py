"""`UsageMeter`: what a simulated cluster holds, sampled at every scaling tick — GPU shares,
memory with and without the store's sharing (`sim.memory`), the fragment ratio of the
servers that hold an instance — and the wall time the scaling policy takes (`TimedPolicy`:
INFless Figure 17's scheduling overhead, measured around the very policy the autoscaler
calls). Reads the simulated objects only; the timing reads `clock.perf_s`, a measurement
that never feeds back into a decision.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping

from infless.clock import perf_s
from infless.scaling.baselines import ScalingPolicy
from infless.scaling.config import ScalingConfig
from infless.scaling.demand import Demand
from infless.scaling.predictors import LatencyPredictor
from infless.scaling.view import PoolView, ScalingPlan
from infless.sim.memory import MIB, ModelMemory, server_bytes
from infless.sim.model import SimInstance, SimServer, SimState
from infless.sim.results import Usage


class TimedPolicy:
    """A scaling policy with its wall time and its starts counted, plan by plan."""

    def __init__(self, policy: ScalingPolicy) -> None:
        self._policy = policy
        self.seconds = 0.0
        self.starts = 0
        self.plans: list[tuple[int, float]] = []  # (starts, seconds) of each plan

    def __call__(
        self, view: PoolView, demand: Demand, predictor: LatencyPredictor, cfg: ScalingConfig
    ) -> ScalingPlan:
        started = perf_s()
        plan = self._policy(view, demand, predictor, cfg)
        took_s = perf_s() - started
        starts = len(plan.starts)
        self.seconds += took_s
        self.starts += starts
        self.plans.append((starts, took_s))
        return plan


class UsageMeter:
    def __init__(self, memory: Mapping[str, ModelMemory]) -> None:
        self._memory = memory
        self._gpu_seconds = 0.0
        self._memory_mib: list[float] = []
        self._unshared_mib: list[float] = []
        self._cpu_fragments: list[float] = []
        self._gpu_fragments: list[float] = []
        self._active: list[int] = []

    def sample(
        self, servers: Iterable[SimServer], instances: Iterable[SimInstance], tick_s: float
    ) -> None:
        """One tick's holdings: `instances` are every instance holding capacity."""
        held: dict[str, list[tuple[str, int]]] = {}
        gpu_pct = 0
        gpu_servers: dict[str, SimServer] = {}
        for instance in instances:
            if instance.state is SimState.STOPPED:
                continue
            gpu_pct += instance.config.gpu_pct
            held.setdefault(instance.server.server_id, []).append(
                (instance.model_key, instance.config.batch_size)
            )
            if instance.config.gpu_pct > 0:
                gpu_servers[instance.server.server_id] = instance.server
        self._gpu_seconds += gpu_pct / 100.0 * tick_s
        if self._memory:
            shared = unshared = 0
            for on_server in held.values():
                with_store, without = server_bytes(on_server, self._memory)
                shared += with_store
                unshared += without
            self._memory_mib.append(shared / MIB)
            self._unshared_mib.append(unshared / MIB)
        free = total = active = 0
        for server in servers:
            if server.instances > 0:
                active += 1
                free += max(0, server.free_cpus)
                total += server.cpus
        self._active.append(active)
        if total > 0:
            self._cpu_fragments.append(free / total)
        gpu_total = sum(sum(s.gpu_pct) for s in gpu_servers.values())
        if gpu_total > 0:
            gpu_free = sum(sum(max(0, f) for f in s.free_gpu_pct) for s in gpu_servers.values())
            self._gpu_fragments.append(gpu_free / gpu_total)

    def usage(self, timed: TimedPolicy | None) -> Usage:
        memory = self._memory_mib
        return Usage(
            gpu_seconds=self._gpu_seconds,
            memory_mean_mib=statistics.fmean(memory) if memory else 0.0,
            memory_median_mib=statistics.median(memory) if memory else 0.0,
            memory_peak_mib=max(memory, default=0.0),
            unshared_mean_mib=statistics.fmean(self._unshared_mib) if memory else 0.0,
            cpu_fragment=_mean(self._cpu_fragments),
            gpu_fragment=_mean(self._gpu_fragments),
            active_servers=statistics.fmean(self._active) if self._active else 0.0,
            plan_s=timed.seconds if timed is not None else 0.0,
            planned_starts=timed.starts if timed is not None else 0,
        )


def _mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else 0.0

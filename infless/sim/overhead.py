"""Scheduling overhead and resource fragments of one plan (INFless §5.3, Figure 17).

`schedule_once` hands a policy an empty cluster and a mix's peak rates. The policy is the
very function the autoscaler calls every tick. It times the call: the best of `repeats`,
on the wall clock, because the host is shared and a slower repetition is someone else's.
Then it reads the plan's placements: the instances it started, and the fragment ratio they
leave. That ratio is the unallocated cores (and GPU shares) on the servers that hold an
instance, over those servers' capacity ("we measure the amount of unallocated resources in
each active server and derive the resource fragment ratio by dividing it by all the
server's resources").

The timing reads `clock.perf_s`; nothing decides on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from infless.clock import perf_s
from infless.scaling.baselines import get_policy
from infless.scaling.config import ScalingConfig
from infless.scaling.demand import Demand
from infless.scaling.predictors import CachedPredictor, LatencyPredictor
from infless.scaling.view import FunctionView, PoolView, ScalingPlan, ServerView
from infless.sim.cluster import SimFunction


@dataclass(frozen=True, slots=True)
class Scheduled:
    policy: str
    instances: int
    seconds: float  # the plan's wall time (best of the repetitions)
    cpu_fragment: float  # unallocated cores on the servers holding an instance / their cores
    gpu_fragment: float  # ... GPU shares on the servers holding a GPU instance
    active_servers: int
    unmet_rps: float

    @property
    def us_per_instance(self) -> float:
        return 1e6 * self.seconds / self.instances if self.instances else 0.0


def fragments(plan: ScalingPlan, servers: Sequence[ServerView]) -> tuple[float, float, int]:
    """(CPU fragment ratio, GPU fragment ratio, active servers) after `plan`'s starts."""
    by_id = {s.server_id: s for s in servers}
    used_cpus: dict[str, int] = {}
    used_gpu: dict[str, int] = {}
    for start in plan.starts:
        used_cpus[start.server_id] = used_cpus.get(start.server_id, 0) + start.config.cpus
        if start.config.gpu_pct > 0:
            used_gpu[start.server_id] = used_gpu.get(start.server_id, 0) + start.config.gpu_pct
    cores = sum(by_id[s].cpus for s in used_cpus)
    cpu_fragment = 1.0 - sum(used_cpus.values()) / cores if cores else 0.0
    gpu_capacity = sum(sum(by_id[s].gpu_pct) for s in used_gpu)
    gpu_fragment = 1.0 - sum(used_gpu.values()) / gpu_capacity if gpu_capacity else 0.0
    return cpu_fragment, gpu_fragment, len(used_cpus)


def schedule_once(
    functions: Sequence[SimFunction],
    servers: Sequence[ServerView],
    predictor: LatencyPredictor,
    scaling: ScalingConfig,
    policy: str,
    repeats: int = 3,
) -> Scheduled:
    """One plan for the mix's peak rates on empty `servers` (see the module docstring)."""
    views = tuple(FunctionView(f.name, f.model_key, f.slo_ms, f.max_batch) for f in functions)
    view = PoolView(tuple(servers), views)
    demand = Demand({f.name: f.load.peak_rps for f in functions})
    planner = get_policy(policy)
    cached = CachedPredictor(predictor)
    planner(view, demand, cached, scaling)  # the predictions once: a running server has them
    best_s = float("inf")
    plan = ScalingPlan()
    for _ in range(max(1, repeats)):
        started = perf_s()
        plan = planner(view, demand, cached, scaling)
        best_s = min(best_s, perf_s() - started)
    cpu_fragment, gpu_fragment, active = fragments(plan, servers)
    unmet = sum(d.unmet_rps for d in plan.decisions)
    return Scheduled(
        policy=policy,
        instances=len(plan.starts),
        seconds=best_s,
        cpu_fragment=cpu_fragment,
        gpu_fragment=gpu_fragment,
        active_servers=active,
        unmet_rps=unmet,
    )

"""The simulated world: servers with capacity, instances with batch queues, the run's settings
(`SimConfig`) and its result.

A `SimServer` hands out cores and GPU shares and records any overrun instead of failing, so a
test can assert there was none. A `SimInstance` is `Routable` for `RateShareDispatcher`: it
accepts while ready and its queue is below `queue_capacity_batches` full batches.
Simulation only: mutable, no I/O, no clock (time is passed in).
"""

from __future__ import annotations

import enum
import json
import math
from collections import deque
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Literal

from infless.types import InstanceConfig


class SimState(enum.Enum):
    STARTING = "starting"
    READY = "ready"
    DRAINING = "draining"
    STOPPED = "stopped"


class SimServer:
    def __init__(self, server_id: str, cpus: int, gpus: int) -> None:
        self.server_id = server_id
        self.cpus = cpus
        self.free_cpus = cpus
        self.gpu_pct = [100] * gpus
        self.free_gpu_pct = [100] * gpus
        self.overruns = 0

    def allocate(self, cpus: int, gpu_pct: int, device: int | None) -> None:
        self.free_cpus -= cpus
        if self.free_cpus < 0:
            self.overruns += 1
        if gpu_pct > 0:
            if device is None or not 0 <= device < len(self.free_gpu_pct):
                self.overruns += 1
                return
            self.free_gpu_pct[device] -= gpu_pct
            if self.free_gpu_pct[device] < 0:
                self.overruns += 1

    def release(self, cpus: int, gpu_pct: int, device: int | None) -> None:
        self.free_cpus += cpus
        if gpu_pct > 0 and device is not None and 0 <= device < len(self.free_gpu_pct):
            self.free_gpu_pct[device] += gpu_pct


class SimInstance:
    def __init__(
        self,
        instance_id: str,
        function: str,
        server: SimServer,
        config: InstanceConfig,
        device: int | None,
        planned_exec_ms: float,
        timeout_s: float,
        queue_capacity: int,
        started_s: float,
    ) -> None:
        self.instance_id = instance_id
        self.function = function
        self.server = server
        self.config = config
        self.device = device
        self.planned_exec_ms = planned_exec_ms
        self.timeout_s = timeout_s
        self.queue_capacity = queue_capacity
        self.started_s = started_s
        self.state = SimState.STARTING
        self.queue: deque[float] = deque()
        self.busy = False
        self.timer_s: float | None = None
        self.last_arrival_s: float | None = None
        self.interarrival_s = math.inf  # EWMA of arrival gaps ("adaptive" dispatch)
        self.share_rps = 0.0
        self.last_active_s = started_s
        self.served = 0
        self.batches = 0
        self.stopped_s: float | None = None  # when it was drained and its capacity freed

    @property
    def accepting(self) -> bool:
        return self.state is SimState.READY and len(self.queue) < self.queue_capacity

    @property
    def idle(self) -> bool:
        return not self.busy and not self.queue


class _Tally:
    """What a run's totals give: SLO violations (late, rejected, unserved), their rate over
    the requests, and the mean cores held. For `SimResult` and `AppResult`."""

    __slots__ = ()
    late: int
    rejected: int
    unserved: int
    requests: int
    core_seconds: float
    duration_s: float

    @property
    def violations(self) -> int:
        return self.late + self.rejected + self.unserved

    @property
    def violation_rate(self) -> float:
        return self.violations / self.requests if self.requests else 0.0

    @property
    def mean_cores(self) -> float:
        return self.core_seconds / self.duration_s if self.duration_s else 0.0


@dataclass(frozen=True, slots=True)
class SimResult(_Tally):
    """What a run measured; `violation_rate` counts late, rejected and unserved requests."""

    policy: str
    servers: int
    duration_s: float
    requests: int
    completed: int
    late: int
    rejected: int
    unserved: int
    p50_ms: float
    p99_ms: float
    mean_batch: float
    instance_starts: int
    instance_stops: int
    peak_instances: int
    core_seconds: float
    capacity_overruns: int
    unmet_ticks: int
    plans: int
    configs: dict[str, int] = field(default_factory=dict)
    apps: dict[str, AppResult] = field(default_factory=dict)  # model-less ones, by model

    @property
    def cores_per_100_rps(self) -> float:
        served_rps = self.completed / self.duration_s if self.duration_s else 0.0
        return 100.0 * self.mean_cores / served_rps if served_rps else 0.0

    def to_json(self) -> str:
        data = asdict(self)
        if not self.apps:  # runs without model-less applications print what they always did
            del data["apps"]
        data.update(
            violation_rate=self.violation_rate,
            mean_cores=self.mean_cores,
            cores_per_100_rps=self.cores_per_100_rps,
        )
        return json.dumps(data, sort_keys=True)


@dataclass(frozen=True, slots=True)
class AppResult(_Tally):
    """One model-less application's run: its requests (also counted in `SimResult`), which
    variant took them, what its variants' instances cost and how often it switched."""

    model: str
    slo_ms: float
    requests: int
    completed: int
    late: int  # answered over the SLO
    rejected: int  # refused (every queue full) or no variant met the goals
    unserved: int  # still waiting for a cold start when the run ended
    p99_ms: float
    mean_accuracy: float  # the served variant's accuracy, averaged over answered requests
    core_seconds: float  # cores x time of its variants' instances, starting and draining too
    switches: int  # vertical moves (upgrades and downgrades: `ModelEntry.switches`)
    by_variant: dict[str, int]  # requests routed to each variant
    answered_by_variant: dict[str, int]
    by_second: dict[int, dict[str, int]]  # second of arrival -> variant -> requests
    moves: tuple[tuple[float, str, str], ...] = ()  # (time, "upgrade"/"downgrade", variant)
    duration_s: float = 0.0

    def mix(self, start_s: float, end_s: float) -> dict[str, int]:
        """Requests per variant among those that arrived in [start_s, end_s)."""
        total: dict[str, int] = {}
        for second, counts in self.by_second.items():
            if start_s <= second < end_s:
                for variant, count in counts.items():
                    total[variant] = total.get(variant, 0) + count
        return total


def core_seconds(instances: Iterable[SimInstance], end_s: float) -> float:
    """Cores x time the instances held within [0, end_s]: from their start (starting
    counts) until their capacity was freed (draining counts), or `end_s`."""
    total = 0.0
    for instance in instances:
        stop_s = end_s if instance.stopped_s is None else min(instance.stopped_s, end_s)
        total += instance.config.cpus * max(0.0, stop_s - min(instance.started_s, end_s))
    return total


def config_label(config: InstanceConfig) -> str:
    return f"b{config.batch_size}/c{config.cpus}/g{config.gpu_pct}"


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


@dataclass(frozen=True, slots=True)
class SimConfig:
    servers: int = 4
    cpus_per_server: int = 16
    gpus_per_server: int = 0
    duration_s: float = 60.0
    cold_start_s: float = 1.0
    queue_capacity_batches: int = 4
    slack_ms: float = 2.0
    exec_jitter: float = 0.0  # each batch's time × U(1 − j, 1 + j)
    seed: int = 1
    prewarm: bool = True  # plan for the t = 0 rates at t = 0, those instances ready at once
    # `batching.policy` modes ("deadline": INFless, full or t_slo − t_exec − slack; "adaptive";
    # "eager"), plus "busy-aware": deadline with t_slo − 2·t_exec − slack, so a batch that
    # finds the worker still busy (at most t_exec more) still meets the SLO
    dispatch: Literal["deadline", "adaptive", "eager", "busy-aware"] = "deadline"
    # the cold-start policy of scale-to-zero functions (`SimFunction.scale_to_zero`)
    coldstart: Literal["fixed", "hhp", "lsth"] = "lsth"
    coldstart_params: tuple[tuple[str, float], ...] = ()
    release_grace_s: float = 0.0

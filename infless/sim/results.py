"""What a simulation run measured: `SimResult` (the whole run) and `AppResult` (one model-less
application), and the small helpers they are computed with. Pure data: no I/O, no clock.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Protocol

from infless.types import InstanceConfig

CPU_PRICE_PER_HOUR = 0.034  # INFless §5.3: a CPU of an r5.2xlarge at AWS EC2
GPU_PRICE_PER_HOUR = 2.5  # ... and a 2080Ti, priced from a P100 of a p3.2xlarge


class Held(Protocol):
    """An instance as `core_seconds` reads it."""

    @property
    def config(self) -> InstanceConfig: ...

    @property
    def started_s(self) -> float: ...

    @property
    def stopped_s(self) -> float | None: ...


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
class Usage:
    """What a run held over time, sampled at every scaling tick: GPUs (whole devices' worth
    of shares), memory with the store's sharing counted and without it (every instance its
    own weights), and the fragment ratios (INFless §5.3: unallocated cores on the servers
    that hold an instance, over their cores; GPU shares likewise on the servers that hold a
    GPU instance)."""

    gpu_seconds: float = 0.0
    memory_mean_mib: float = 0.0
    memory_median_mib: float = 0.0
    memory_peak_mib: float = 0.0
    unshared_mean_mib: float = 0.0  # the same instances, each with its own weights
    cpu_fragment: float = 0.0  # mean over the ticks with an active server
    gpu_fragment: float = 0.0  # mean over the ticks with a GPU instance
    active_servers: float = 0.0  # mean number of servers holding an instance
    plan_s: float = 0.0  # wall time the scaling policy took, over every plan
    planned_starts: int = 0  # instances those plans started


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
    usage: Usage = field(default_factory=Usage)
    mode: str = "request"

    @property
    def served_rps(self) -> float:
        return self.completed / self.duration_s if self.duration_s else 0.0

    @property
    def cores_per_100_rps(self) -> float:
        served_rps = self.served_rps
        return 100.0 * self.mean_cores / served_rps if served_rps else 0.0

    @property
    def gpus_per_100_rps(self) -> float:
        served_rps = self.served_rps
        mean_gpus = self.usage.gpu_seconds / self.duration_s if self.duration_s else 0.0
        return 100.0 * mean_gpus / served_rps if served_rps else 0.0

    def cost_per_request(
        self, cpu_per_hour: float = CPU_PRICE_PER_HOUR, gpu_per_hour: float = GPU_PRICE_PER_HOUR
    ) -> float:
        """Dollars per answered request at INFless §5.3's prices (Table 4)."""
        dollars = (self.core_seconds * cpu_per_hour + self.usage.gpu_seconds * gpu_per_hour) / 3600
        return dollars / self.completed if self.completed else 0.0

    def to_json(self) -> str:
        data = asdict(self)
        if not self.apps:  # runs without model-less applications print what they always did
            del data["apps"]
        data.update(
            violation_rate=self.violation_rate,
            mean_cores=self.mean_cores,
            cores_per_100_rps=self.cores_per_100_rps,
            gpus_per_100_rps=self.gpus_per_100_rps,
            cost_per_request=self.cost_per_request(),
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


def core_seconds(instances: Iterable[Held], end_s: float) -> float:
    """Cores x time the instances held within [0, end_s]: from their start (starting
    counts) until their capacity was freed (draining counts), or `end_s`."""
    total = 0.0
    for instance in instances:
        stop_s = end_s if instance.stopped_s is None else min(instance.stopped_s, end_s)
        total += instance.config.cpus * max(0.0, stop_s - min(instance.started_s, end_s))
    return total


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]

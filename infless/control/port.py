"""The port between the policies' shells and whatever runs instances: `ScalingTarget`.

The autoscaler, the prewarm manager and the variant monitor read a `Snapshot` (servers,
and per function the planner's `FunctionView`, its owner, arrival count, request activity,
measured batch times and what its ready instances served) and the first two hand back a
`ScalingPlan`; they never see the pool, its instances or workers. The worker pool
implements the port on a server, the simulator implements it for thousands of simulated
servers, so both run the very same autoscaler, manager and monitor objects.
Pure data and a Protocol: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from infless.control.desired import Owner
from infless.scaling.view import FunctionView, InstanceState, PoolView, ScalingPlan, ServerView


@dataclass(frozen=True, slots=True)
class ActivityView:
    """What the request path saw of one function (see `dataplane.activity`)."""

    outstanding: int = 0  # requests in flight now
    idle_since_s: float | None = None  # last finish (or deployment), None while busy
    last_finish_s: float | None = None  # None until a request finished
    idle_arrivals: tuple[float, ...] = ()  # the latest arrivals that ended an idle period
    idle_arrival_count: int = 0  # how many such arrivals ever (readers take what is new)


@dataclass(frozen=True, slots=True)
class Measured:
    """One ready instance's execution times per batch size, at its cores and GPU share."""

    cpus: int
    exec_ms_by_batch: Mapping[int, float]
    gpu_pct: int = 0


@dataclass(frozen=True, slots=True)
class Serving:
    """What a function's ready instances did: their running totals (served requests,
    batches, the workers' summed forward time), summed over them, and how they stand now —
    what the variant monitor (`control.variant_monitor`) takes its windows of."""

    served: int = 0
    batches: int = 0
    exec_ms: float = 0.0
    ready: int = 0  # ready instances now
    max_batch: int = 1  # the largest batch size among them (1 with none)
    max_cpus: int = 1  # ... and core count
    queued: int = 0  # requests waiting in their queues now
    # their service time's tail over its mean (the data plane's `ExecModel.tail_ratio`),
    # averaged over those that measured one (None: none has yet)
    tail_ratio: float | None = None
    # their mean service time per batch size now, as the data plane predicts it
    # (`ExecModel.by_batch`), averaged over those that measured their tail (empty: none has)
    service_ms_by_batch: Mapping[int, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class FunctionState:
    view: FunctionView  # what the planner reads: SLO, bounds, instances with their states
    owner: Owner
    arrivals: int  # samples submitted ever, admitted or not: the autoscaler's demand input
    scale_to_zero: bool | None  # the function's label; None: the platform default
    activity: ActivityView = field(default_factory=ActivityView)
    start_s: float = 0.0  # how long its last instance took to become ready
    measured: tuple[Measured, ...] = ()
    p99_ms: float | None = None  # the latency it delivered lately (None: too few answers)
    refused: int = 0  # requests refused for lack of capacity (429), ever
    answered: int = 0  # requests answered, ever (a p99 no new answer moved is stale)
    serving: Serving = field(default_factory=Serving)

    @property
    def name(self) -> str:
        return self.view.name

    @property
    def live(self) -> int:
        """Instances starting or serving (draining ones are on their way out)."""
        return sum(1 for i in self.view.instances if i.state is not InstanceState.DRAINING)


@dataclass(frozen=True, slots=True)
class Snapshot:
    servers: tuple[ServerView, ...]
    functions: tuple[FunctionState, ...]
    now_s: float

    def pool_view(self, owner: Owner) -> PoolView:
        """The planner's input: every server, and the functions `owner` decides for."""
        owned = tuple(f.view for f in self.functions if f.owner is owner)
        return PoolView(self.servers, owned, self.now_s)


class ScalingTarget(Protocol):
    def snapshot(self) -> Snapshot: ...

    def apply(self, plan: ScalingPlan) -> None: ...

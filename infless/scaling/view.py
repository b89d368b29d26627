"""What a scaling policy reads and what it returns: the pool snapshot and the plan's actions.

`PoolView` is a snapshot the shell (or the simulator) builds once per tick: servers with
their free capacity, functions with their live instances. `ScalingPlan` lists actions the
shell applies in order — per function: `SetShare` (dispatch weights of ready instances),
`StartInstance` (a full <b, c, g> with its placement, expected rate range and batch timeout),
`StopInstance` (stop routing to it, drain its queue, then stop the worker); and the
cold-start policy's per-function verdicts: `ReleaseToZero` (idle past its keep-alive window:
no instance) and `Prewarm` (one instance now, before the predicted next request).
Pure data: no I/O, no clock, no behaviour beyond small derived properties.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from infless.scaling.memory import ModelMemory
from infless.scaling.shares import Regime
from infless.types import InstanceConfig


class InstanceState(enum.Enum):
    STARTING = "starting"  # holds its resources, serves nothing yet
    READY = "ready"
    DRAINING = "draining"  # finishing its queue; resources still held (count them as used)


@dataclass(frozen=True, slots=True)
class ServerView:
    """One server's capacity and what is still free (after every live or draining instance).

    `affinity`: function name → how cheaply a new instance of it starts here, in [0, 1]
    (1: the server already holds all of its stored tensors, or an idle instance that can be
    transformed into it cheaply; absent or 0: nothing). The planner multiplies Equation 10's
    e_ij by 1 + affinity_weight · affinity. Compared, but left out of the hash (a dict).
    """

    server_id: str
    cpus: int
    free_cpus: int
    gpu_pct: tuple[int, ...] = ()  # capacity per GPU device, in percent (100 each)
    free_gpu_pct: tuple[int, ...] = ()  # free share per device, same order
    idle_cores: int | None = None  # cores no instance runs on (None: not known)
    affinity: Mapping[str, float] = field(default_factory=dict, hash=False)


@dataclass(frozen=True, slots=True)
class InstanceView:
    instance_id: str
    function: str
    server_id: str
    config: InstanceConfig
    state: InstanceState = InstanceState.READY
    exec_ms: float | None = None  # measured (or planned) t_exec at config.batch_size
    started_s: float = 0.0
    idle_since_s: float | None = None  # last moment it had work, None while it has work
    # the mean time from dispatch to result the data plane measures now at config.batch_size
    # (the worker's forward plus the pipe and the wait for a core; None: not known). An
    # instance runs one batch at a time, so this, not t_exec, bounds the rate it serves.
    service_ms: float | None = None


@dataclass(frozen=True, slots=True)
class FunctionView:
    name: str
    model_key: str
    slo_ms: float
    max_batch: int
    min_instances: int = 0
    max_instances: int = 1_000_000
    keep_warm: bool = True  # keep one instance with zero demand (the cold-start policy says)
    # its instance kept warm at zero demand is standby capacity for a step (a model-less
    # overflow variant): the most throughput on the fewest cores, not the smallest instance
    standby: bool = False
    instances: tuple[InstanceView, ...] = ()
    retired: bool = False  # let go by its owner (a replaced model-less variant): no release held
    # what one instance of its model holds (weights, activations, runtime); None: not known.
    # Only the memory-aware policy (`scaling.dts`) reads it.
    memory: ModelMemory | None = None


@dataclass(frozen=True, slots=True)
class PoolView:
    servers: tuple[ServerView, ...]
    functions: tuple[FunctionView, ...]
    now_s: float = 0.0


@dataclass(frozen=True, slots=True)
class StartInstance:
    """Launch one instance of `function` with `config` on `server_id` (GPU `gpu_index`)."""

    function: str
    config: InstanceConfig
    server_id: str
    gpu_index: int | None  # the device holding config.gpu_pct; None for CPU-only
    exec_ms: float  # the predicted t_exec at config.batch_size
    r_low_rps: float
    r_up_rps: float
    batch_timeout_ms: float  # t_slo − t_exec (0 for b = 1); subtract the IPC slack on top
    efficiency: float  # its score when chosen: Equation 10's e_ij (dts: RPS per MiB; baselines: 0)
    kind: Literal["start"] = "start"


@dataclass(frozen=True, slots=True)
class StopInstance:
    function: str
    instance_id: str
    # "release" (below the band), "keep-alive", "over-max", "zero-demand", "upsize" (replaced
    # by a larger instance on its cores, started in the same plan)
    reason: str
    kind: Literal["stop"] = "stop"


@dataclass(frozen=True, slots=True)
class SetShare:
    function: str
    instance_id: str
    share_rps: float  # becomes Instance.share_rps, the dispatcher's weight
    kind: Literal["share"] = "share"


@dataclass(frozen=True, slots=True)
class ReleaseToZero:
    """The cold-start policy's verdict: the function should have no instance now."""

    function: str
    idle_s: float  # how long it has been idle
    kind: Literal["release"] = "release"


@dataclass(frozen=True, slots=True)
class Prewarm:
    """The cold-start policy's verdict: start one instance now (a request is expected)."""

    function: str
    lead_s: float  # how long before the expected request it starts
    kind: Literal["prewarm"] = "prewarm"


Action = StartInstance | StopInstance | SetShare | ReleaseToZero | Prewarm


@dataclass(frozen=True, slots=True, kw_only=True)
class FunctionDecision:
    """Why the plan does what it does for one function (for logs, metrics and tests)."""

    function: str
    demand_rps: float
    regime: Regime
    r_min_rps: float  # over the ready instances kept
    r_max_rps: float
    starting_rps: float  # Σ r_up of instances already starting
    planned_rps: float  # Σ r_up of the instances this plan starts
    unmet_rps: float  # demand no capacity could be found for
    starts: int = 0
    stops: int = 0
    # configurations no predictor could price, one per reason ("b8/c1/g30: no GPU profile
    # of resnet-50 on …"): never dropped in silence (priced but over the SLO is not here)
    unpriced: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ScalingPlan:
    actions: tuple[Action, ...] = ()
    decisions: tuple[FunctionDecision, ...] = field(default=())

    @property
    def starts(self) -> tuple[StartInstance, ...]:
        return tuple(a for a in self.actions if isinstance(a, StartInstance))

    @property
    def stops(self) -> tuple[StopInstance, ...]:
        return tuple(a for a in self.actions if isinstance(a, StopInstance))

    @property
    def shares(self) -> tuple[SetShare, ...]:
        return tuple(a for a in self.actions if isinstance(a, SetShare))

    def decision(self, function: str) -> FunctionDecision | None:
        return next((d for d in self.decisions if d.function == function), None)

    def by_function(self) -> list[tuple[str, list[Action]]]:
        """The actions grouped by function, in the order to apply them: the functions that
        stop an instance first, so that a start of the same plan gets the cores of the
        instance stopping (a model-less switch, an upsize); otherwise in plan order."""
        grouped: dict[str, list[Action]] = {}
        for action in self.actions:
            grouped.setdefault(action.function, []).append(action)

        def starts_only(item: tuple[str, list[Action]]) -> bool:
            return not any(isinstance(action, StopInstance) for action in item[1])

        return sorted(grouped.items(), key=starts_only)

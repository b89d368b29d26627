"""SimCluster: the simulated servers and instances, as a target of the scaling port.

It implements `control.port.ScalingTarget`, as the server's worker pool does:

- `snapshot` describes servers, functions and instances as the autoscaler, the prewarm
  manager and the variant monitor read them;
- `apply` turns a plan into desired-state transitions (`control.desired`, the same
  functions the pool uses);
- `_reconcile` makes the simulated instances match. It starts what is missing and drains
  what is no longer wanted. A started instance is ready after `cold_start_s`, with the batch
  settings and `ExecModel` a real instance takes from its warm-up
  (`policy.instance_settings` over the truth's times at the warm-up's batch sizes).

So the simulator runs the very same policy objects as a server.

Simulation only: no I/O, no clock (`now_s` is set by the engine).
"""

from __future__ import annotations

import itertools
from collections import Counter, deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial

from infless.control import desired as d
from infless.control.port import ActivityView, FunctionState, Serving, Snapshot
from infless.dataplane.config import BatchingConfig
from infless.dataplane.dispatcher import RateShareDispatcher
from infless.dataplane.latency import (
    ExecModel,
    FunctionLatency,
    mean_service_ms,
    mean_tail_ratio,
)
from infless.dataplane.policy import choose_batch_size, instance_settings, powers_of_two_up_to
from infless.scaling.available import config_label
from infless.scaling.bounds import rate_bounds
from infless.scaling.config import ScalingConfig
from infless.scaling.memory import ModelMemory
from infless.scaling.predictors import LatencyPredictor
from infless.scaling.view import (
    FunctionView,
    InstanceState,
    InstanceView,
    ScalingPlan,
    ServerView,
    StartInstance,
)
from infless.sim.model import SimInstance, SimServer, SimState
from infless.sim.workload import RateSchedule
from infless.types import InstanceConfig

_STATE = {SimState.STARTING: InstanceState.STARTING, SimState.READY: InstanceState.READY}
MAX_IDLE_ARRIVALS = 1024


@dataclass(frozen=True, slots=True)
class SimFunction:
    name: str
    model_key: str
    slo_ms: float
    max_batch: int
    load: RateSchedule
    min_instances: int = 0
    max_instances: int = 1_000_000
    keep_warm: bool = True
    scale_to_zero: bool = False  # the cold-start policy may release it (the prewarm manager)


@dataclass(eq=False)
class SimFunctionState:
    """One simulated function: its desired state, instances, waiting room, request activity
    and measured latency (the budget admission gives each request: `FunctionLatency`)."""

    spec: SimFunction
    arrivals: Iterator[float]
    desired: d.DesiredState
    latency: FunctionLatency
    dispatcher: RateShareDispatcher = field(default_factory=RateShareDispatcher)
    instances: dict[str, SimInstance] = field(default_factory=dict)
    ready: list[SimInstance] = field(default_factory=list)
    # admitted while no instance was ready: (arrival_s, deadline_s, requests)
    waiting: deque[tuple[float, float, float]] = field(default_factory=deque)
    arrived: int = 0
    outstanding: float = 0.0
    idle_since_s: float | None = 0.0
    last_finish_s: float | None = None
    idle_arrivals: deque[float] = field(default_factory=lambda: deque(maxlen=MAX_IDLE_ARRIVALS))
    idle_arrival_count: int = 0
    last_start_s: float = 0.0
    refused: int = 0  # arrivals refused for lack of capacity (429)

    def arrive(self, now_s: float, count: float = 1.0) -> None:
        self.arrived += round(count)
        if self.outstanding <= 0:
            self.idle_arrivals.append(now_s)
            self.idle_arrival_count += 1
        self.outstanding += count

    def finish(self, now_s: float, count: float = 1.0) -> None:
        self.outstanding = max(0.0, self.outstanding - count)
        if self.outstanding <= 1e-9:
            self.outstanding = 0.0
            self.idle_since_s = self.last_finish_s = now_s

    @property
    def waiting_count(self) -> float:
        return sum(count for _, _, count in self.waiting)

    @property
    def starting(self) -> bool:
        return any(i.state is SimState.STARTING for i in self.instances.values())


class _Mint:
    """New desired entries of one simulated function; a uniform one takes the largest batch
    the planner's predictor says is feasible on one core (as a measured instance would)."""

    def __init__(self, fn: SimFunctionState, predictor: LatencyPredictor, ids: Iterator[int]):
        self._fn = fn
        self._predictor = predictor
        self._ids = ids

    def _id(self) -> str:
        return f"{self._fn.spec.name}-{next(self._ids)}"

    def uniform(self) -> d.WantedInstance:
        spec = self._fn.spec
        exec_ms = {
            b: self._predictor.predict_latency_ms(spec.model_key, b, 1, 0)
            for b in powers_of_two_up_to(spec.max_batch)
        }
        b = choose_batch_size(exec_ms, spec.slo_ms, spec.max_batch)
        return d.WantedInstance(self._id(), InstanceConfig(b, 1), exec_ms=exec_ms[b])

    def planned(self, start: StartInstance) -> d.WantedInstance:
        return d.planned_instance(self._id(), start)

    def moved(self, entry: d.WantedInstance) -> d.WantedInstance:
        return replace(entry, instance_id=self._id())  # simulated servers never leave


class SimCluster:
    def __init__(
        self,
        functions: dict[str, SimFunctionState],
        servers: Sequence[SimServer],
        scaling: ScalingConfig,
        batching: BatchingConfig,
        planner: LatencyPredictor,
        truth: LatencyPredictor,
        on_start: Callable[[SimInstance], None],
        store_affinity: bool = False,
        memory: Mapping[str, ModelMemory] | None = None,
    ) -> None:
        self.functions = functions
        self._memory = memory or {}  # model → its figures, in the view (the DTS policy)
        self._store_affinity = store_affinity
        self.servers = list(servers)
        self._server_by_id = {s.server_id: s for s in self.servers}
        self._scaling = scaling
        self._batching = batching
        self._planner = planner
        self._truth = truth
        self._on_start = on_start  # schedules the instance's READY event
        self._ids = itertools.count()
        self.now_s = 0.0
        self.starts = self.stops = 0
        self.configs: Counter[str] = Counter()
        self.events: list[tuple[float, str, str]] = []  # (time, "start" | "stop", instance)

    # -- the scaling port --------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        servers = tuple(
            ServerView(
                s.server_id,
                s.cpus,
                s.free_cpus,
                tuple(s.gpu_pct),
                tuple(s.free_gpu_pct),
                idle_cores=max(0, s.free_cpus),  # a simulated instance runs on its own cores
                affinity=self._affinity(s),
            )
            for s in self.servers
        )
        states = tuple(self._function_state(fn) for fn in self.functions.values())
        return Snapshot(servers, states, self.now_s)

    def _affinity(self, server: SimServer) -> dict[str, float]:
        """With `store_affinity`: 1 for every function whose model's tensors the server's
        store holds (an instance of that model runs there), as the server's store reports
        (`control.transforms`: the share of a function's tensors stored); else none."""
        if not self._store_affinity or not server.models:
            return {}
        return {
            name: 1.0 for name, fn in self.functions.items() if fn.spec.model_key in server.models
        }

    def _function_state(self, fn: SimFunctionState) -> FunctionState:
        spec = fn.spec
        view = FunctionView(
            name=spec.name,
            model_key=spec.model_key,
            slo_ms=spec.slo_ms,
            max_batch=spec.max_batch,
            min_instances=spec.min_instances,
            max_instances=spec.max_instances,
            keep_warm=spec.keep_warm,
            memory=self._memory.get(spec.model_key),
            instances=tuple(
                InstanceView(
                    instance_id=i.instance_id,
                    function=i.function,
                    server_id=i.server.server_id,
                    config=i.config,
                    state=_STATE[i.state],
                    exec_ms=i.planned_exec_ms,
                    started_s=i.started_s,
                    idle_since_s=i.last_active_s if i.idle else None,
                )
                for i in fn.instances.values()
                if i.state is not SimState.DRAINING
            ),
        )
        activity = ActivityView(
            round(fn.outstanding),
            fn.idle_since_s if fn.outstanding <= 0 else None,
            fn.last_finish_s,
            tuple(fn.idle_arrivals),
            fn.idle_arrival_count,
        )
        return FunctionState(
            view,
            fn.desired.owner,
            fn.arrived,
            spec.scale_to_zero,
            activity,
            fn.last_start_s,
            p99_ms=fn.latency.p99_ms(self.now_s),
            refused=fn.refused,
            answered=fn.latency.answered,
            serving=_serving(fn.ready),
        )

    def apply(self, plan: ScalingPlan) -> None:
        for name, actions in plan.by_function():  # stops first, as the gateway's pool
            self.change(self.functions[name], partial(d.applied, actions=actions))

    def change(
        self,
        fn: SimFunctionState,
        transition: Callable[[d.DesiredState, d.InstanceMint], d.DesiredState],
    ) -> None:
        fn.desired = transition(fn.desired, _Mint(fn, self._planner, self._ids))
        self._reconcile(fn)

    def wake(self, fn: SimFunctionState) -> None:
        """A request waits and nothing is starting: at least one instance again."""
        self.change(fn, d.woken)

    # -- reconciliation ------------------------------------------------------------------
    def _reconcile(self, fn: SimFunctionState) -> None:
        wanted = {w.instance_id: w for w in fn.desired.instances}
        for instance in list(fn.instances.values()):
            if instance.instance_id not in wanted:
                self._stop(fn, instance)
        for instance_id, entry in wanted.items():
            current = fn.instances.get(instance_id)
            if current is None:
                self._start(fn, entry)
            elif entry.share_rps is not None:
                current.share_rps = entry.share_rps

    def _start(self, fn: SimFunctionState, entry: d.WantedInstance) -> None:
        server = self._server_by_id.get(entry.server_id) or self._roomiest()
        c = entry.config
        server.allocate(c.cpus, c.gpu_pct, entry.gpu_index, fn.spec.model_key)
        exec_ms = entry.exec_ms or self._planner.predict_latency_ms(
            fn.spec.model_key, c.batch_size, c.cpus, c.gpu_pct
        )
        instance = SimInstance(
            instance_id=entry.instance_id,
            function=fn.spec.name,
            model_key=fn.spec.model_key,
            server=server,
            config=c,
            device=entry.gpu_index,
            planned_exec_ms=exec_ms,
            started_s=self.now_s,
        )
        bounds = rate_bounds(c.batch_size, exec_ms, fn.spec.slo_ms, self._scaling.rounding)
        instance.share_rps = entry.share_rps if entry.share_rps is not None else bounds.r_up_rps
        fn.instances[instance.instance_id] = instance
        self.starts += 1
        self.events.append((self.now_s, "start", instance.instance_id))
        self.configs[f"{fn.spec.name} {config_label(c)}"] += 1
        self._on_start(instance)

    def _roomiest(self) -> SimServer:
        return max(self.servers, key=lambda s: s.free_cpus)

    def _stop(self, fn: SimFunctionState, instance: SimInstance) -> None:
        if instance.state in (SimState.DRAINING, SimState.STOPPED):
            return
        if instance in fn.ready:
            fn.ready.remove(instance)
        fn.dispatcher.forget(instance.instance_id)
        instance.state = SimState.DRAINING
        instance.server.lend(instance.config.cpus)
        self.events.append((self.now_s, "stop", instance.instance_id))
        if not instance.busy and not instance.queued:
            self.finish(instance)

    def finish(self, instance: SimInstance) -> None:
        """A drained instance is gone: its capacity is free again."""
        instance.state = SimState.STOPPED
        instance.stopped_s = self.now_s
        c = instance.config
        instance.server.release(c.cpus, c.gpu_pct, instance.device, instance.model_key)
        self.functions[instance.function].instances.pop(instance.instance_id, None)
        self.stops += 1

    def ready(self, instance: SimInstance) -> bool:
        """A started instance serves from now on, with the settings its warm-up gives;
        False when it was stopped while starting."""
        if instance.state is not SimState.STARTING:
            return False
        fn = self.functions[instance.function]
        spec, c = fn.spec, instance.config
        warmup = {
            b: self._truth.predict_latency_ms(spec.model_key, b, c.cpus, c.gpu_pct)
            for b in powers_of_two_up_to(c.batch_size)
        }
        settings = instance_settings(
            self._batching, spec.slo_ms, spec.max_batch, warmup, c.batch_size
        )
        model = ExecModel(warmup, settings.batch_size, self._batching.tail_quantile)
        instance.become_ready(settings, model, self.now_s)
        fn.last_start_s = self.now_s - instance.started_s
        fn.ready.append(instance)
        return True

    @property
    def used_cores(self) -> int:
        return sum(s.cpus - s.free_cpus for s in self.servers)

    @property
    def live_instances(self) -> int:
        return sum(len(f.instances) for f in self.functions.values())


def _serving(ready: Sequence[SimInstance]) -> Serving:
    """What the variant monitor reads: the ready instances' totals, summed."""
    return Serving(
        served=round(sum(i.served for i in ready)),
        batches=round(sum(i.batches for i in ready)),
        exec_ms=sum(i.exec_ms_total for i in ready),
        ready=len(ready),
        max_batch=max((i.config.batch_size for i in ready), default=1),
        max_cpus=max((i.config.cpus for i in ready), default=1),
        queued=sum(i.queued for i in ready),
        tail_ratio=mean_tail_ratio(i.model for i in ready),
        service_ms_by_batch=mean_service_ms(i.model for i in ready),
    )

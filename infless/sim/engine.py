"""Discrete-event simulation of a cluster driven by the real scaling policies and dispatcher.

Each tick: arrivals since the last tick go into `scaling.demand`, a `PoolView` of the
simulated servers and instances goes to the policy (`scaling.baselines.get_policy(name)`),
and its plan is applied — `SetShare` sets dispatcher weights, `StartInstance` takes capacity
and makes an instance ready after `cold_start_s`, `StopInstance` drains it (no new requests,
its queue finishes, then its capacity is freed). Each arrival is routed by the real
`RateShareDispatcher` over the ready instances; a batch is taken when
`batching.policy.dispatch_due` says so (b requests, or the oldest waited the timeout
t_slo − t_exec − slack); its latency comes from the "truth" predictor at the real batch
size. Requests that find every queue full are rejected; requests that find no ready
instance wait for one (a cold start). No processes, no wall clock: many servers are cheap.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections import Counter, deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

from infless.dataplane.dispatcher import RateShareDispatcher
from infless.dataplane.policy import DispatchMode, dispatch_at, update_interarrival
from infless.scaling.baselines import ScalingPolicy, get_policy
from infless.scaling.config import ScalingConfig
from infless.scaling.demand import Demand, DemandState, estimate, record_times
from infless.scaling.predictors import CachedPredictor, LatencyPredictor
from infless.scaling.view import (
    FunctionView,
    InstanceState,
    InstanceView,
    PoolView,
    ScalingPlan,
    ServerView,
    SetShare,
    StartInstance,
    StopInstance,
)
from infless.sim.model import SimInstance, SimResult, SimServer, SimState, config_label, percentile
from infless.sim.workload import RateSchedule, arrivals

_ARRIVAL, _TICK, _READY, _DONE, _TIMEOUT = range(5)
_STATE = {SimState.STARTING: InstanceState.STARTING, SimState.READY: InstanceState.READY}


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


@dataclass(eq=False)
class _Function:
    spec: SimFunction
    arrivals: Iterator[float]
    dispatcher: RateShareDispatcher = field(default_factory=RateShareDispatcher)
    instances: dict[str, SimInstance] = field(default_factory=dict)
    ready: list[SimInstance] = field(default_factory=list)
    waiting: deque[float] = field(default_factory=deque)
    window: list[float] = field(default_factory=list)


class Simulation:
    def __init__(
        self,
        functions: Sequence[SimFunction],
        truth: LatencyPredictor,
        cfg: SimConfig | None = None,
        scaling: ScalingConfig | None = None,
        planner_predictor: LatencyPredictor | None = None,
        policy: ScalingPolicy | None = None,
    ) -> None:
        self.cfg = cfg = cfg or SimConfig()
        self.scaling = scaling = scaling or ScalingConfig()
        self.truth = truth
        self.planner_predictor = CachedPredictor(planner_predictor or truth)
        self.policy = policy or get_policy(scaling.policy)
        self.rng = random.Random(cfg.seed)
        self._mode: DispatchMode = "deadline" if cfg.dispatch == "busy-aware" else cfg.dispatch
        self.servers = [
            SimServer(f"s{k:04d}", cfg.cpus_per_server, cfg.gpus_per_server)
            for k in range(cfg.servers)
        ]
        self.server_by_id = {s.server_id: s for s in self.servers}
        self.functions = {
            f.name: _Function(f, arrivals(f.load, cfg.duration_s, random.Random(self.rng.random())))
            for f in functions
        }
        self.demand_state = DemandState()
        self._events: list[tuple[float, int, int, object]] = []
        self._seq = itertools.count()
        self._ids = itertools.count()
        self.latencies_ms: list[float] = []
        self.late = self.rejected = self.requests = 0
        self.starts = self.stops = self.plans = self.unmet_ticks = 0
        self.batches = self.served = 0
        self.peak_instances = 0
        self.core_seconds = 0.0
        self.configs: Counter[str] = Counter()
        self.late_by_s: Counter[int] = Counter()  # second of arrival -> late or rejected
        self.last_plan: ScalingPlan | None = None

    # -- events ---------------------------------------------------------------------------
    def _push(self, at_s: float, kind: int, payload: object) -> None:
        heapq.heappush(self._events, (at_s, next(self._seq), kind, payload))

    def _next_arrival(self, fn: _Function) -> None:
        at_s = next(fn.arrivals, None)
        if at_s is not None:
            self._push(at_s, _ARRIVAL, fn)

    def run(self) -> SimResult:
        for fn in self.functions.values():
            self._next_arrival(fn)
        if self.cfg.prewarm:
            rates = {n: f.spec.load.rate_at(0.0) for n, f in self.functions.items()}
            self._plan(0.0, Demand(rates), ready_now=True)
            self._push(self.scaling.tick_s, _TICK, None)
        else:
            self._push(0.0, _TICK, None)
        while self._events:
            now, _, kind, payload = heapq.heappop(self._events)
            if kind == _ARRIVAL:
                assert isinstance(payload, _Function)
                self._arrive(payload, now)
            elif kind == _TICK:
                self._tick(now)
            elif kind == _READY:
                assert isinstance(payload, SimInstance)
                self._ready(payload, now)
            elif kind == _DONE:
                assert isinstance(payload, tuple)
                self._done(payload[0], payload[1], now)
            else:
                assert isinstance(payload, SimInstance)
                if payload.timer_s == now:  # else a newer deadline replaced this one
                    payload.timer_s = None
                    self._try_dispatch(payload, now)
        return self._result()

    def _arrive(self, fn: _Function, now: float) -> None:
        self.requests += 1
        fn.window.append(now)
        self._next_arrival(fn)
        instance = fn.dispatcher.choose(fn.ready)
        if instance is not None:
            if instance.last_arrival_s is not None:
                gap_s = now - instance.last_arrival_s
                instance.interarrival_s = update_interarrival(instance.interarrival_s, gap_s)
            instance.last_arrival_s = now
            instance.queue.append(now)
            self._try_dispatch(instance, now)
        elif fn.ready:
            self.rejected += 1
            self.late_by_s[int(now)] += 1
        else:
            fn.waiting.append(now)

    def _try_dispatch(self, inst: SimInstance, now: float) -> None:
        if inst.busy or not inst.queue:
            return
        b = inst.config.batch_size
        due_s = dispatch_at(
            len(inst.queue), b, inst.queue[0], inst.timeout_s, self._mode, inst.interarrival_s
        )
        if now < due_s - 1e-9:
            if inst.timer_s != due_s:
                inst.timer_s = due_s
                self._push(due_s, _TIMEOUT, inst)
            return
        batch = [inst.queue.popleft() for _ in range(min(b, len(inst.queue)))]
        c = inst.config
        exec_ms = self.truth.predict_latency_ms(
            self.functions[inst.function].spec.model_key, len(batch), c.cpus, c.gpu_pct
        )
        if self.cfg.exec_jitter > 0:
            exec_ms *= 1.0 + self.rng.uniform(-self.cfg.exec_jitter, self.cfg.exec_jitter)
        inst.busy = True
        inst.batches += 1
        self.batches += 1
        self._push(now + exec_ms / 1000.0, _DONE, (inst, batch))

    def _done(self, inst: SimInstance, batch: list[float], now: float) -> None:
        slo_ms = self.functions[inst.function].spec.slo_ms
        for arrival_s in batch:
            latency_ms = (now - arrival_s) * 1000.0
            self.latencies_ms.append(latency_ms)
            if latency_ms > slo_ms + 1e-6:
                self.late += 1
                self.late_by_s[int(arrival_s)] += 1
        inst.busy = False
        inst.served += len(batch)
        self.served += len(batch)
        inst.last_active_s = now
        if inst.state is SimState.DRAINING and not inst.queue:
            self._finish(inst)
        else:
            self._try_dispatch(inst, now)

    def _ready(self, inst: SimInstance, now: float) -> None:
        if inst.state is not SimState.STARTING:
            return
        inst.state = SimState.READY
        inst.last_active_s = now
        fn = self.functions[inst.function]
        fn.ready.append(inst)
        while fn.waiting:  # admitted while no instance was ready: they go in, beyond capacity
            inst.queue.append(fn.waiting.popleft())
        self._try_dispatch(inst, now)

    def _finish(self, inst: SimInstance) -> None:
        inst.state = SimState.STOPPED
        c = inst.config
        inst.server.release(c.cpus, c.gpu_pct, inst.device)
        fn = self.functions[inst.function]
        fn.instances.pop(inst.instance_id, None)
        self.stops += 1

    # -- control ----------------------------------------------------------------------------
    def _tick(self, now: float) -> None:
        dcfg = self.scaling.demand
        for name, fn in self.functions.items():
            self.demand_state = record_times(self.demand_state, name, fn.window, dcfg)
            fn.window = []
        demand, self.demand_state = estimate(self.demand_state, now, dcfg)
        self._plan(now, demand, ready_now=False)
        cores = sum(s.cpus - s.free_cpus for s in self.servers)
        self.core_seconds += cores * self.scaling.tick_s
        if now + self.scaling.tick_s < self.cfg.duration_s:
            self._push(now + self.scaling.tick_s, _TICK, None)

    def view(self, now: float) -> PoolView:
        servers = tuple(
            ServerView(s.server_id, s.cpus, s.free_cpus, tuple(s.gpu_pct), tuple(s.free_gpu_pct))
            for s in self.servers
        )
        functions = tuple(
            FunctionView(
                name=fn.spec.name,
                model_key=fn.spec.model_key,
                slo_ms=fn.spec.slo_ms,
                max_batch=fn.spec.max_batch,
                min_instances=fn.spec.min_instances,
                max_instances=fn.spec.max_instances,
                keep_warm=fn.spec.keep_warm,
                instances=tuple(
                    InstanceView(
                        instance_id=i.instance_id,
                        function=i.function,
                        server_id=i.server.server_id,
                        config=i.config,
                        state=_STATE.get(i.state, InstanceState.DRAINING),
                        exec_ms=i.planned_exec_ms,
                        started_s=i.started_s,
                        idle_since_s=i.last_active_s if i.idle else None,
                    )
                    for i in fn.instances.values()
                    if i.state is not SimState.DRAINING
                ),
            )
            for fn in self.functions.values()
        )
        return PoolView(servers, functions, now)

    def _plan(self, now: float, demand: Demand, ready_now: bool) -> None:
        plan = self.policy(self.view(now), demand, self.planner_predictor, self.scaling)
        self.plans += 1
        self.last_plan = plan
        if any(d.unmet_rps > 0 for d in plan.decisions):
            self.unmet_ticks += 1
        for action in plan.actions:
            if isinstance(action, SetShare):
                target = self.functions[action.function].instances.get(action.instance_id)
                if target is not None:
                    target.share_rps = action.share_rps
            elif isinstance(action, StartInstance):
                self._start(action, now, ready_now)
            elif isinstance(action, StopInstance):
                self._stop(action)
        live = sum(len(f.instances) for f in self.functions.values())
        self.peak_instances = max(self.peak_instances, live)

    def _start(self, action: StartInstance, now: float, ready_now: bool) -> None:
        server = self.server_by_id[action.server_id]
        c = action.config
        server.allocate(c.cpus, c.gpu_pct, action.gpu_index)
        timeout_ms = action.batch_timeout_ms - self.cfg.slack_ms
        if self.cfg.dispatch == "busy-aware" and c.batch_size > 1:
            timeout_ms -= action.exec_ms
        timeout_s = max(0.0, timeout_ms / 1000.0)
        inst = SimInstance(
            instance_id=f"{action.function}-{next(self._ids)}",
            function=action.function,
            server=server,
            config=c,
            device=action.gpu_index,
            planned_exec_ms=action.exec_ms,
            timeout_s=timeout_s,
            queue_capacity=c.batch_size * self.cfg.queue_capacity_batches,
            started_s=now,
        )
        inst.share_rps = action.r_up_rps
        self.functions[action.function].instances[inst.instance_id] = inst
        self.starts += 1
        self.configs[f"{action.function} {config_label(c)}"] += 1
        self._push(now if ready_now else now + self.cfg.cold_start_s, _READY, inst)

    def _stop(self, action: StopInstance) -> None:
        fn = self.functions[action.function]
        inst = fn.instances.get(action.instance_id)
        if inst is None or inst.state in (SimState.DRAINING, SimState.STOPPED):
            return
        if inst in fn.ready:
            fn.ready.remove(inst)
        fn.dispatcher.forget(inst.instance_id)
        inst.state = SimState.DRAINING
        if inst.idle:
            self._finish(inst)

    def _result(self) -> SimResult:
        latencies = sorted(self.latencies_ms)
        unserved = sum(len(f.waiting) for f in self.functions.values())
        return SimResult(
            policy=self.scaling.policy,
            servers=len(self.servers),
            duration_s=self.cfg.duration_s,
            requests=self.requests,
            completed=len(latencies),
            late=self.late,
            rejected=self.rejected,
            unserved=unserved,
            p50_ms=percentile(latencies, 0.50),
            p99_ms=percentile(latencies, 0.99),
            mean_batch=self.served / self.batches if self.batches else 0.0,
            instance_starts=self.starts,
            instance_stops=self.stops,
            peak_instances=self.peak_instances,
            core_seconds=self.core_seconds,
            capacity_overruns=sum(s.overruns for s in self.servers),
            unmet_ticks=self.unmet_ticks,
            plans=self.plans,
            configs=dict(self.configs),
        )


def simulate(
    functions: Sequence[SimFunction],
    truth: LatencyPredictor,
    cfg: SimConfig | None = None,
    scaling: ScalingConfig | None = None,
    planner_predictor: LatencyPredictor | None = None,
) -> SimResult:
    return Simulation(functions, truth, cfg, scaling, planner_predictor).run()

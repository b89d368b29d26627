"""Discrete-event simulation of a cluster driven by the server's own control plane.

The simulated servers and instances (`cluster.SimCluster`) implement the scaling port, so
the simulator runs the very same `Autoscaler` (and, for scale-to-zero functions, the same
`PrewarmManager`) as a server: each tick, the autoscaler reads the cluster's snapshot
(arrivals since the last tick feed its demand estimate) and hands back a plan, which the
cluster applies to each function's desired state and reconciles — a start takes capacity
and makes an instance ready after `cold_start_s`, a stop drains it (no new requests, its
queue finishes, then its capacity is freed). Each arrival is routed by the real
`RateShareDispatcher` over the ready instances; a batch is taken when
`dataplane.policy.dispatch_at` says so (b requests, or the oldest waited the timeout
t_slo − t_exec − slack); its latency comes from the "truth" predictor at the real batch
size. Requests that find every queue full are rejected; requests that find no ready
instance wait for one (a cold start). No processes, no wall clock: many servers are cheap.

Model-less applications (`modelless.SimApp`) run beside the functions: their variants are
functions of their own, the autoscaler runs the server's `ModellessPlanner` (model-vertical
scaling) before Algorithm 1, each arrival picks its variant with `catalog.choose` and then
goes the way an arrival of that function goes, and every `modelless.monitor_s` the
variants' states are updated as the gateway's monitor does (see `sim.modelless`).
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from infless.coldstart.policies import ColdStartPolicy, build_policy
from infless.control.autoscaler import Autoscaler
from infless.control.desired import DesiredState, Owner
from infless.control.prewarm import PrewarmManager
from infless.dataplane.policy import DispatchMode, dispatch_at, update_interarrival
from infless.modelless.config import ModellessConfig
from infless.scaling.baselines import ScalingPolicy, get_policy
from infless.scaling.config import ScalingConfig
from infless.scaling.demand import Demand
from infless.scaling.predictors import CachedPredictor, LatencyPredictor
from infless.scaling.view import ScalingPlan
from infless.sim.cluster import SimCluster, SimFunction, SimFunctionState
from infless.sim.model import (
    SimConfig,
    SimInstance,
    SimResult,
    SimServer,
    SimState,
    core_seconds,
    percentile,
)
from infless.sim.modelless import (
    AppRun,
    ProfilePredictor,
    SimApp,
    SimApps,
)
from infless.sim.workload import arrivals

__all__ = ["SimApp", "SimConfig", "SimFunction", "Simulation", "simulate"]

_ARRIVAL, _TICK, _READY, _DONE, _TIMEOUT, _APP_ARRIVAL, _MONITOR = range(7)


class Simulation:
    def __init__(
        self,
        functions: Sequence[SimFunction],
        truth: LatencyPredictor,
        cfg: SimConfig | None = None,
        scaling: ScalingConfig | None = None,
        planner_predictor: LatencyPredictor | None = None,
        policy: ScalingPolicy | None = None,
        apps: Sequence[SimApp] = (),
        modelless: ModellessConfig | None = None,
    ) -> None:
        """`apps`: model-less applications, each deployed as one function per ready variant;
        their variants' latency (truth and plan) is their profiles' (`ProfilePredictor`)."""
        self.cfg = cfg = cfg or SimConfig()
        self.scaling = scaling = scaling or ScalingConfig()
        self.modelless = modelless or ModellessConfig()
        planner_predictor = planner_predictor or truth
        if apps:
            profiles = [p for app in apps for p in app.ready]
            truth = ProfilePredictor(profiles, truth)
            planner_predictor = ProfilePredictor(profiles, planner_predictor)
        self.truth = truth
        self.planner_predictor = CachedPredictor(planner_predictor)
        self.rng = random.Random(cfg.seed)
        self._mode: DispatchMode = "deadline" if cfg.dispatch == "busy-aware" else cfg.dispatch
        self.servers = [
            SimServer(f"s{k:04d}", cfg.cpus_per_server, cfg.gpus_per_server)
            for k in range(cfg.servers)
        ]
        self.functions = {
            f.name: SimFunctionState(
                f,
                arrivals(f.load, cfg.duration_s, random.Random(self.rng.random())),
                DesiredState(Owner.AUTOSCALER),
            )
            for f in functions
        }
        self.modelless_apps = SimApps(apps, self.modelless, scaling.demand)
        self.apps = self.modelless_apps.runs
        self.catalog = self.modelless_apps.catalog
        for app in apps:
            for spec in self.modelless_apps.add(
                app, arrivals(app.load, cfg.duration_s, self._stream())
            ):
                if spec.name in self.functions:
                    raise ValueError(f"{spec.name!r}: a function and a variant of {app.model!r}")
                no_arrivals = arrivals(spec.load, cfg.duration_s, random.Random(0))
                self.functions[spec.name] = SimFunctionState(
                    spec, no_arrivals, DesiredState(Owner.AUTOSCALER)
                )
        self.cluster = SimCluster(
            self.functions,
            self.servers,
            scaling,
            self.planner_predictor,
            cfg.slack_ms,
            cfg.queue_capacity_batches,
            busy_aware=cfg.dispatch == "busy-aware",
            on_start=self._started,
        )
        self.vertical = self.modelless_apps.planner
        self.autoscaler = Autoscaler(
            self.cluster, scaling, self.planner_predictor, policy or get_policy(scaling.policy),
            vertical=self.vertical,
        )  # fmt: skip
        self.prewarm: PrewarmManager | None = None
        if any(f.scale_to_zero for f in functions):
            coldstart: ColdStartPolicy[Any] = build_policy(
                cfg.coldstart, dict(cfg.coldstart_params)
            )
            self.prewarm = PrewarmManager(
                self.cluster, coldstart, cfg.release_grace_s, scale_to_zero_default=False
            )
        self._ready_now = False
        self._events: list[tuple[float, int, int, object]] = []
        self._seq = itertools.count()
        self.latencies_ms: list[float] = []
        self.late = self.rejected = self.requests = 0
        self.plans = self.unmet_ticks = 0
        self.batches = self.served = 0
        self.peak_instances = 0
        self.core_seconds = 0.0
        self.late_by_s: Counter[int] = Counter()  # second of arrival -> late or rejected
        self.started: list[SimInstance] = []  # every instance, in the order they started

    def _stream(self) -> random.Random:
        return random.Random(self.rng.random())

    # -- events ---------------------------------------------------------------------------
    def _push(self, at_s: float, kind: int, payload: object) -> None:
        heapq.heappush(self._events, (at_s, next(self._seq), kind, payload))

    def _next_arrival(self, fn: SimFunctionState) -> None:
        at_s = next(fn.arrivals, None)
        if at_s is not None:
            self._push(at_s, _ARRIVAL, fn)

    def _next_app_arrival(self, app: AppRun) -> None:
        at_s = next(app.arrivals, None)
        if at_s is not None:
            self._push(at_s, _APP_ARRIVAL, app)

    def run(self) -> SimResult:
        for fn in self.functions.values():
            self._next_arrival(fn)
        for app in self.apps.values():
            self._next_app_arrival(app)
        if self.cfg.prewarm:
            self._prewarm()
            self._push(self.scaling.tick_s, _TICK, None)
        else:
            self._push(0.0, _TICK, None)
        if self.apps:  # after the prewarmed instances' READY events
            self._push(0.0, _MONITOR, None)
        while self._events:
            now, _, kind, payload = heapq.heappop(self._events)
            self.cluster.now_s = now
            self._handle(kind, payload, now)
        return self._result()

    def _handle(self, kind: int, payload: object, now: float) -> None:
        if kind == _ARRIVAL:
            assert isinstance(payload, SimFunctionState)
            self._arrive(payload, now)
        elif kind == _TICK:
            self._tick(now)
        elif kind == _READY:
            assert isinstance(payload, SimInstance)
            self.cluster.ready(payload)
            self._try_dispatch(payload, now)
        elif kind == _DONE:
            assert isinstance(payload, tuple)
            self._done(payload[0], payload[1], payload[2], now)
        elif kind == _APP_ARRIVAL:
            assert isinstance(payload, AppRun)
            self._app_arrive(payload, now)
        elif kind == _MONITOR:
            self._monitor(now)
        else:
            assert isinstance(payload, SimInstance)
            if payload.timer_s == now:  # else a newer deadline replaced this one
                payload.timer_s = None
                self._try_dispatch(payload, now)

    def _prewarm(self) -> None:
        """Plan for the t = 0 rates at t = 0; those instances are ready at once."""
        rates = {n: f.spec.load.rate_at(0.0) for n, f in self.functions.items()}
        rates.update(self.modelless_apps.prewarm_rates())
        self._ready_now = True
        self._planned(self.autoscaler.plan_for(Demand(rates)))
        self._ready_now = False

    def _arrive(self, fn: SimFunctionState, now: float) -> None:
        self.requests += 1
        fn.arrive(now)
        self._next_arrival(fn)
        self._route(fn, now)

    def _app_arrive(self, app: AppRun, now: float) -> None:
        """A query of a model-less application: its variant, then that function's path."""
        self.requests += 1
        function = self.modelless_apps.choose(app, now)
        self._next_app_arrival(app)
        if function is None:  # no variant meets the goals: refused
            self.rejected += 1
            self.late_by_s[int(now)] += 1
            return
        fn = self.functions[function]
        fn.arrive(now)
        self._route(fn, now)

    def _route(self, fn: SimFunctionState, now: float) -> None:
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
            fn.refused += 1
            self.late_by_s[int(now)] += 1
            fn.finish(now)
            app = self.modelless_apps.of_function.get(fn.spec.name)
            if app is not None:
                app.rejected += 1
        else:
            fn.waiting.append(now)
            if not fn.starting:
                self.cluster.wake(fn)

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
        self._push(now + exec_ms / 1000.0, _DONE, (inst, batch, exec_ms))

    def _done(self, inst: SimInstance, batch: list[float], exec_ms: float, now: float) -> None:
        fn = self.functions[inst.function]
        app = self.modelless_apps.of_function.get(inst.function)
        if app is not None:
            app.served(inst.function, batch, exec_ms, now)
        slo_ms = fn.spec.slo_ms
        for arrival_s in batch:
            latency_ms = (now - arrival_s) * 1000.0
            self.latencies_ms.append(latency_ms)
            if latency_ms > slo_ms + 1e-6:
                self.late += 1
                self.late_by_s[int(arrival_s)] += 1
        fn.finish(now, len(batch))
        inst.busy = False
        inst.served += len(batch)
        self.served += len(batch)
        inst.last_active_s = now
        if inst.state is SimState.DRAINING and not inst.queue:
            self.cluster.finish(inst)
        else:
            self._try_dispatch(inst, now)

    def _started(self, instance: SimInstance) -> None:
        self.started.append(instance)
        now = self.cluster.now_s
        self._push(now if self._ready_now else now + self.cfg.cold_start_s, _READY, instance)

    # -- control ----------------------------------------------------------------------------
    def _tick(self, now: float) -> None:
        self._planned(self.autoscaler.tick())
        if self.prewarm is not None:
            self.prewarm.tick()
        self.core_seconds += self.cluster.used_cores * self.scaling.tick_s
        if now + self.scaling.tick_s < self.cfg.duration_s:
            self._push(now + self.scaling.tick_s, _TICK, None)

    def _monitor(self, now: float) -> None:
        """The variants' states, every `modelless.monitor_s` (`VariantMonitor.tick`)."""
        self.modelless_apps.monitor(self.functions, now)
        step = self.modelless.monitor_s
        if now + step < self.cfg.duration_s:
            self._push(now + step, _MONITOR, None)

    def _planned(self, plan: ScalingPlan) -> None:
        self.plans += 1
        self.modelless_apps.planned(self.cluster.now_s)
        if any(d.unmet_rps > 0 for d in plan.decisions):
            self.unmet_ticks += 1
        self.peak_instances = max(self.peak_instances, self.cluster.live_instances)

    def core_seconds_of(self, functions: Iterable[str]) -> float:
        """Cores x time held by the instances of `functions` over the run (starting and
        draining included): what `AppResult.core_seconds` counts, for any function."""
        names = set(functions)
        return core_seconds((i for i in self.started if i.function in names), self.cfg.duration_s)

    @property
    def last_plan(self) -> ScalingPlan:
        return self.autoscaler.last_plan

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
            instance_starts=self.cluster.starts,
            instance_stops=self.cluster.stops,
            peak_instances=self.peak_instances,
            core_seconds=self.core_seconds,
            capacity_overruns=sum(s.overruns for s in self.servers),
            unmet_ticks=self.unmet_ticks,
            plans=self.plans,
            configs=dict(self.cluster.configs),
            apps={
                m: a.result(self.functions, self.started, self.cfg.duration_s)
                for m, a in self.apps.items()
            },
        )


def simulate(
    functions: Sequence[SimFunction],
    truth: LatencyPredictor,
    cfg: SimConfig | None = None,
    scaling: ScalingConfig | None = None,
    planner_predictor: LatencyPredictor | None = None,
    apps: Sequence[SimApp] = (),
    modelless: ModellessConfig | None = None,
) -> SimResult:
    return Simulation(
        functions, truth, cfg, scaling, planner_predictor, apps=apps, modelless=modelless
    ).run()

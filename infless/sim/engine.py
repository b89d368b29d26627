"""Per-request discrete-event simulation of a cluster driven by the server's own policies.

The world (`sim.world`) holds the servers, the functions and the server's control plane
behind the scaling port. This engine moves every request the way the gateway's data plane
does, through the same pure decisions:

- arrival: the function's budget (`latency.FunctionLatency`: the SLO, steered by the p99 it
  measured), the rate-share dispatcher's proposal (`RateShareDispatcher`), then
  `admission.candidates` — joined where its batch is served by its deadline, else refused
  (429); with no ready instance it waits for one (a cold start wakes the function);
- release: a free instance takes its waiting batch when `release.release_at_s` says so
  ("slo" dispatch by default: the smallest sustaining batch, or the oldest deadline less
  the batch's tail), with its target batch re-derived by `release.next_target`;
- service: the batch takes the truth's time at its size (× jitter); the instance's
  `ExecModel` observes it (so tails and admission follow), the function's latency records
  each answer.

Model-less applications (`modelless.SimApp`) run beside the functions: each arrival picks its
variant with the catalogue's `choose` — spilling over, as on the server, to another running
variant when the selected one would not serve it within `[modelless] spill_share` of the
SLO (`admission.has_room`), and held to the SLO where its variant can meet it — then goes
the way an arrival of that function goes.
No processes, no wall clock: many servers are cheap (for thousands, `sim.fluid`).
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter
from collections.abc import Iterable, Sequence

from infless.control.autoscaler import Autoscaler
from infless.control.prewarm import PrewarmManager
from infless.dataplane import admission
from infless.dataplane.policy import update_interarrival
from infless.dataplane.release import next_target, release_at_s
from infless.modelless.config import ModellessConfig
from infless.scaling.baselines import ScalingPolicy
from infless.scaling.config import ScalingConfig
from infless.scaling.predictors import LatencyPredictor
from infless.scaling.view import ScalingPlan
from infless.sim.cluster import SimFunction, SimFunctionState
from infless.sim.memory import ModelMemory
from infless.sim.model import SimInstance, SimState
from infless.sim.modelless import AppRun, SimApp
from infless.sim.results import SimResult
from infless.sim.settings import SimConfig, with_sections
from infless.sim.world import World

__all__ = ["SimApp", "SimConfig", "SimFunction", "Simulation", "simulate"]

_ARRIVAL, _TICK, _READY, _DONE, _TIMEOUT, _APP_ARRIVAL, _MONITOR = range(7)
_EPS_S = 1e-9


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
        memory: dict[str, ModelMemory] | None = None,
    ) -> None:
        """`scaling`, `modelless`: in place of `cfg`'s sections (None: `cfg`'s)."""
        self.cfg = cfg = with_sections(cfg or SimConfig(), scaling, modelless)
        self.world = world = World(
            functions,
            truth,
            cfg,
            on_start=self._started,
            planner_predictor=planner_predictor,
            policy=policy,
            apps=apps,
            memory=memory,
        )
        self.functions = world.functions
        self.cluster = world.cluster
        self.servers = world.servers
        self.apps = world.modelless_apps.runs
        self.rng = world.stream()
        self._ready_now = False
        self._events: list[tuple[float, int, int, object]] = []
        self._seq = itertools.count()
        self.latencies_ms: list[float] = []
        self.late = self.rejected = self.requests = 0
        self.batches = self.served = 0
        self.late_by_s: Counter[int] = Counter()  # second of arrival -> late or rejected

    @property
    def autoscaler(self) -> Autoscaler:
        return self.world.autoscaler

    @property
    def prewarm(self) -> PrewarmManager | None:
        return self.world.prewarm

    @property
    def last_plan(self) -> ScalingPlan:
        return self.world.autoscaler.last_plan

    def core_seconds_of(self, functions: Iterable[str]) -> float:
        return self.world.core_seconds_of(functions)

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
        tick_s = self.cfg.scaling.tick_s
        if self.cfg.prewarm:
            self._ready_now = True
            self.world.prewarm_plan()
            self._ready_now = False
            self._push(tick_s, _TICK, None)
        else:
            self._push(0.0, _TICK, None)
        if self.apps:  # after the prewarmed instances' READY events
            self._push(0.0, _MONITOR, None)
        while self._events:
            now, _, kind, payload = heapq.heappop(self._events)
            self.cluster.now_s = now
            self._handle(kind, payload, now)
        return self.world.result(
            self.requests, self.latencies_ms, self.late, self.rejected, self.served, self.batches
        )

    def _handle(self, kind: int, payload: object, now: float) -> None:
        if kind == _ARRIVAL:
            assert isinstance(payload, SimFunctionState)
            self._arrive(payload, now)
        elif kind == _TICK:
            self._tick(now)
        elif kind == _READY:
            assert isinstance(payload, SimInstance)
            self._ready(payload, now)
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

    # -- the data plane ---------------------------------------------------------------------
    def _arrive(self, fn: SimFunctionState, now: float) -> None:
        self.requests += 1
        self._next_arrival(fn)
        self._route(fn, now)

    def _app_arrive(self, app: AppRun, now: float) -> None:
        """A query of a model-less application: its variant, then that function's path."""
        self.requests += 1
        chosen = self.world.modelless_apps.choose(
            app,
            now,
            lambda name, share: self._has_room(name, now, share),
            self.cfg.modelless.spill_share,
        )
        self._next_app_arrival(app)
        if chosen is None:  # no variant meets the goals: refused
            self.rejected += 1
            self.late_by_s[int(now)] += 1
            return
        function, held = chosen  # held to the SLO, as the front door holds it
        self._route(self.functions[function], now, slo_held=held)

    def _has_room(self, function: str, now: float, share: float) -> bool:
        """The front door's room test: whether a ready instance of `function` would serve a
        request arriving now within `share` of its budget grown no further than the SLO
        (`slo_budget_ms`)."""
        fn = self.functions.get(function)
        if fn is None:
            return False
        deadline_s = now + share * fn.latency.slo_budget_ms(now, 0.0) / 1000.0
        return admission.has_room(fn.ready, now, deadline_s)

    def _route(self, fn: SimFunctionState, now: float, slo_held: bool = False) -> None:
        """The router's `submit` (see the module docstring); `slo_held`: within the budget
        grown no further than the SLO (`slo_budget_ms`)."""
        fn.arrive(now)
        latency = fn.latency
        budget_ms = latency.slo_budget_ms(now, 0.0) if slo_held else latency.budget_ms(now, 0.0)
        deadline_s = now + budget_ms / 1000.0
        chosen = fn.dispatcher.choose(fn.ready)
        for instance in admission.candidates(chosen, fn.ready, now, deadline_s):
            if instance.accepting:
                self._enqueue(instance, now, deadline_s)
                return
        if fn.ready:
            self.rejected += 1
            fn.refused += 1
            self.late_by_s[int(now)] += 1
            fn.finish(now)
            app = self.world.modelless_apps.of_function.get(fn.spec.name)
            if app is not None:
                app.rejected += 1
            return
        fn.waiting.append((now, deadline_s, 1.0))  # admitted: it waits for an instance
        if not fn.starting:
            self.cluster.wake(fn)

    def _enqueue(self, instance: SimInstance, now: float, deadline_s: float) -> None:
        """`BatchQueue.submit`: the arrival gap, the target batch, then the release."""
        if instance.last_arrival_s == instance.last_arrival_s:  # not NaN: a gap to measure
            gap_s = now - instance.last_arrival_s
            instance.interarrival_s = update_interarrival(instance.interarrival_s, gap_s)
        instance.last_arrival_s = now
        instance.queue.append((now, deadline_s))
        instance.arrivals += 1
        settings, model = instance.settings, instance.model
        assert settings is not None
        assert model is not None
        instance.target = next_target(
            model,
            instance.arrivals,
            instance.interarrival_s,
            settings.utilization,
            instance.target,
        )
        self._try_dispatch(instance, now)

    def _try_dispatch(self, inst: SimInstance, now: float) -> None:
        if inst.busy or not inst.queue:
            return
        settings, model = inst.settings, inst.model
        assert settings is not None
        assert model is not None
        head_s, head_deadline_s = inst.queue[0]
        due_s = release_at_s(
            settings,
            model,
            len(inst.queue),
            head_s,
            head_deadline_s,
            inst.interarrival_s,
            inst.target,
            closed=inst.state is SimState.DRAINING,
        )
        if now < due_s - _EPS_S:
            if inst.timer_s != due_s:
                inst.timer_s = due_s
                self._push(due_s, _TIMEOUT, inst)
            return
        size = min(settings.batch_size, len(inst.queue))
        batch = [inst.queue.popleft()[0] for _ in range(size)]
        c = inst.config
        exec_ms = self.world.truth.predict_latency_ms(inst.model_key, size, c.cpus, c.gpu_pct)
        jitter = self.cfg.exec_jitter
        if jitter > 0:
            exec_ms *= 1.0 + self.rng.uniform(-jitter, jitter)
        inst.in_flight = size
        inst.dispatched_s = now
        self._push(now + exec_ms / 1000.0, _DONE, (inst, batch, exec_ms))

    def _done(self, inst: SimInstance, batch: list[float], exec_ms: float, now: float) -> None:
        fn = self.functions[inst.function]
        app = self.world.modelless_apps.of_function.get(inst.function)
        if app is not None:
            app.served(inst.function, batch, exec_ms, now)
        slo_ms = fn.spec.slo_ms
        for arrival_s in batch:
            latency_ms = (now - arrival_s) * 1000.0
            self.latencies_ms.append(latency_ms)
            fn.latency.answered_in(now, latency_ms, 0.0)
            if latency_ms > slo_ms + 1e-6:
                self.late += 1
                self.late_by_s[int(arrival_s)] += 1
        size = len(batch)
        fn.finish(now, size)
        assert inst.model is not None
        inst.model.observe(size, exec_ms)
        inst.in_flight = 0
        inst.served += size
        inst.batches += 1
        inst.exec_ms_total += exec_ms
        self.served += size
        self.batches += 1
        inst.last_active_s = now
        if inst.state is SimState.DRAINING and not inst.queue:
            self.cluster.finish(inst)
        else:
            self._try_dispatch(inst, now)

    def _started(self, instance: SimInstance) -> None:
        self.world.started.append(instance)
        now = self.cluster.now_s
        self._push(now if self._ready_now else now + self.cfg.cold_start_s, _READY, instance)

    def _ready(self, instance: SimInstance, now: float) -> None:
        """A started instance serves; what waited for its function goes into its queue."""
        if not self.cluster.ready(instance):
            return
        fn = self.functions[instance.function]
        while fn.waiting:  # admitted while no instance was ready: they go in, beyond bounds
            arrival_s, deadline_s, _ = fn.waiting.popleft()
            instance.queue.append((arrival_s, deadline_s))
        self._try_dispatch(instance, now)

    # -- control ----------------------------------------------------------------------------
    def _tick(self, now: float) -> None:
        self.world.tick(now)
        tick_s = self.cfg.scaling.tick_s
        if now + tick_s < self.cfg.duration_s:
            self._push(now + tick_s, _TICK, None)

    def _monitor(self, now: float) -> None:
        """The variants' states, every `modelless.monitor_s` (`VariantMonitor.tick`)."""
        self.world.monitor.tick()
        step = self.cfg.modelless.monitor_s
        if now + step < self.cfg.duration_s:
            self._push(now + step, _MONITOR, None)


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

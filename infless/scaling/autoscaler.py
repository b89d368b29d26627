"""Autoscaler: the imperative shell around the pure scaling policies (INFless §3.2, §3.4).

Every tick on the injected clock it counts each function's arrivals into the demand
estimate, snapshots the pool as a `PoolView` (this server's cores × overcommit, every
instance with its config and measured t_exec), asks the configured policy for a plan, and
applies it: shares become the dispatcher's weights, starts become non-uniform instances,
stops drain first. Functions pinned by a manual scale are left alone, but their cores count.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

from infless.clock import Clock, Ticker
from infless.dataplane.instance import Instance
from infless.dataplane.instance import InstanceState as LiveState
from infless.scaling.baselines import ScalingPolicy, get_policy
from infless.scaling.config import ScalingConfig
from infless.scaling.demand import Demand, DemandState, estimate, forget, record
from infless.scaling.measured import MeasuredPredictor
from infless.scaling.predictors import LatencyPredictor
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
from infless.workers.pool import DeployedFunction, WorkerPool

log = logging.getLogger(__name__)

SERVER_ID = "local"
_STATES = {
    LiveState.STARTING: InstanceState.STARTING,
    LiveState.READY: InstanceState.READY,
    LiveState.DRAINING: InstanceState.DRAINING,
}


class Autoscaler:
    def __init__(
        self,
        pool: WorkerPool,
        clock: Clock,
        cfg: ScalingConfig,
        cores: int,
        predictor: MeasuredPredictor | None = None,
        policy: ScalingPolicy | None = None,
        profiles: Callable[[frozenset[str]], LatencyPredictor | None] | None = None,
    ) -> None:
        self._pool = pool
        self._clock = clock
        self._cfg = cfg
        self._capacity_cpus = max(1, math.floor(cores * cfg.cpu_overcommit))
        self.predictor = predictor or MeasuredPredictor()
        self._policy = policy or get_policy(cfg.policy)
        self._demand = DemandState()
        self._profiles = profiles  # loads operator-profile predictions for a set of models
        self._profiled_keys: frozenset[str] | None = None
        self._ticker = Ticker(clock, cfg.tick_s, self.tick, "autoscaler")
        self.last_plan = ScalingPlan()
        self.ticks = 0

    def start(self) -> None:
        self._ticker.start()

    async def stop(self) -> None:
        await self._ticker.stop()

    def tick(self) -> ScalingPlan:
        now = self._clock.now()
        managed = [f for f in self._pool.functions.values() if self._pool.is_autoscaled(f)]
        for name in [n for n in self._demand.tracks if n not in self._pool.functions]:
            self._demand = forget(self._demand, name)
        for function in managed:
            count = function.router.take_arrivals()
            self._demand = record(self._demand, function.spec.name, count, now, self._cfg.demand)
        demand, self._demand = estimate(self._demand, now, self._cfg.demand)
        released = {f.spec.name for f in managed if not f.keep_warm}
        if released:  # idle past its keep-alive: the decaying estimate must not hold it warm
            demand = Demand({k: v for k, v in demand.rates_rps.items() if k not in released})
        self._refresh_profiles(managed)
        self._observe(managed)
        view = self.view(managed, now)
        plan = self._policy(view, demand, self.predictor, self._cfg)
        self.apply(plan)
        self.last_plan = plan
        self.ticks += 1
        return plan

    def _refresh_profiles(self, managed: list[DeployedFunction]) -> None:
        """Configurations no instance measured are predicted from operator profiles."""
        keys = frozenset(f.spec.image for f in managed)
        if self._profiles is not None and keys != self._profiled_keys:
            self._profiled_keys = keys
            self.predictor.set_fallback(self._profiles(keys))

    def view(self, managed: list[DeployedFunction], now: float) -> PoolView:
        used = sum(
            i.config.cpus for i in self._pool.all_instances() if i.state is not LiveState.DEAD
        )
        server = ServerView(SERVER_ID, self._capacity_cpus, max(0, self._capacity_cpus - used))
        functions = []
        for function in managed:
            spec = function.spec
            zero_ok = function.keep_warm is False
            functions.append(
                FunctionView(
                    name=spec.name,
                    model_key=spec.image,
                    slo_ms=spec.slo_ms,
                    max_batch=spec.max_batch,
                    min_instances=0 if zero_ok else max(spec.min_instances, 0),
                    max_instances=spec.max_instances,
                    keep_warm=function.keep_warm,
                    instances=tuple(
                        self._instance_view(i, now)
                        for i in function.router.instances
                        if i.state in _STATES
                    ),
                )
            )
        return PoolView((server,), tuple(functions), now)

    def _observe(self, managed: list[DeployedFunction]) -> None:
        """Feed the predictor what the ready instances measure now (warm-up timings, then
        the EWMA of their served batches), averaged over instances of one model and cores."""
        samples: dict[tuple[str, int], dict[int, list[float]]] = {}
        for function in managed:
            for instance in function.router.instances:
                if instance.state is LiveState.READY:
                    key = (function.spec.image, instance.config.cpus)
                    table = samples.setdefault(key, {})
                    for batch_size, exec_ms in instance.exec_ms_by_batch.items():
                        table.setdefault(batch_size, []).append(exec_ms)
        for (model_key, cpus), table in samples.items():
            means = {b: sum(values) / len(values) for b, values in table.items()}
            self.predictor.observe(model_key, cpus, means)

    @staticmethod
    def _instance_view(instance: Instance, now: float) -> InstanceView:
        b = instance.config.batch_size
        measured = instance.exec_ms_by_batch.get(b)
        return InstanceView(
            instance_id=instance.instance_id,
            function=instance.function_name,
            server_id=SERVER_ID,
            config=instance.config,
            state=_STATES[instance.state],
            exec_ms=measured,
            started_s=instance.started_at_s,
            idle_since_s=None if instance.busy else instance.last_active_s,
        )

    def apply(self, plan: ScalingPlan) -> None:
        instances = {i.instance_id: i for i in self._pool.all_instances()}
        for action in plan.actions:
            if isinstance(action, SetShare):
                target = instances.get(action.instance_id)
                if target is not None:
                    target.share_rps = action.share_rps
            elif isinstance(action, StartInstance):
                started = self._pool.start_instance(action.function, action.config)
                log.info(
                    "autoscaler: start %s <b=%d, c=%d> for [%.0f, %.0f] rps",
                    started,
                    action.config.batch_size,
                    action.config.cpus,
                    action.r_low_rps,
                    action.r_up_rps,
                )
            elif isinstance(action, StopInstance):
                log.info("autoscaler: stop %s (%s)", action.instance_id, action.reason)
                self._pool.stop_instance(action.instance_id)

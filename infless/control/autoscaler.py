"""Autoscaler: the imperative shell around the pure scaling policies (INFless §3.2, §3.4).

On every `tick` it:

1. reads the target's snapshot through the scaling port;
2. counts each function's new arrivals into the demand estimate;
3. feeds the instances' measured batch times to the predictor;
4. raises the demand of functions whose p99 nears the SLO or that refused requests
   (`scaling.feedback`);
5. asks the configured policy for a plan over the functions it owns (`control.desired`);
6. holds back releases of young instances while demand has not fallen
   (`scaling.stability`);
7. hands the plan back to the target.

It never sees the pool, instances or workers: the server's pool and the simulator both
implement the port, and both run this same object. It reads no clock either (the snapshot
carries `now`). A `Ticker` calls `tick` on a server; the simulator calls it at its ticks.

It keeps each function's last planning decision (`decision`: demand, regime, unmet demand,
the configurations no predictor could price). Each new reason a configuration went
unpriced is logged once, as a warning: a GPU nobody profiled a model on is said, never idle
in silence. Predictions chain: what the instances measured (per model, cores and GPU
share), then `profiles(keys)`. On a server those are the variants' profiles, then the GPU
profiles for g > 0 and the operator profiles for g = 0.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Protocol

from infless.control.desired import Owner
from infless.control.port import FunctionState, ScalingTarget
from infless.scaling.baselines import ScalingPolicy, get_policy
from infless.scaling.config import ScalingConfig
from infless.scaling.demand import Demand, DemandState, estimate, forget, record_interval
from infless.scaling.feedback import next_pressure, pressed
from infless.scaling.measured import MeasuredPredictor
from infless.scaling.predictors import LatencyPredictor
from infless.scaling.stability import Stability, hold
from infless.scaling.view import (
    FunctionDecision,
    PoolView,
    ScalingPlan,
    StartInstance,
    StopInstance,
)

log = logging.getLogger(__name__)

ProfileLoader = Callable[[frozenset[str]], LatencyPredictor | None]


class PlanningStep(Protocol):
    """A step between the demand estimate and the plan: model-vertical scaling
    (`modelless.planner.ModellessPlanner`) moves an application's demand to the variant that
    should carry it and says which variants need not stay warm."""

    def adjust(self, view: PoolView, demand: Demand) -> tuple[PoolView, Demand]: ...


class Autoscaler:
    def __init__(
        self,
        target: ScalingTarget,
        cfg: ScalingConfig,
        predictor: LatencyPredictor | None = None,
        policy: ScalingPolicy | None = None,
        profiles: ProfileLoader | None = None,
        vertical: PlanningStep | None = None,
    ) -> None:
        """`predictor` None: what the instances measure (`MeasuredPredictor`), with operator
        profiles from `profiles` for configurations none measured. A given predictor (the
        simulator's) is used as it is."""
        self._target = target
        self._cfg = cfg
        self.predictor: LatencyPredictor = predictor or MeasuredPredictor()
        self._policy = policy or get_policy(cfg.policy)
        self._demand = DemandState()
        self._seen_arrivals: dict[str, int] = {}
        self._seen_refused: dict[str, int] = {}
        self._seen_answered: dict[str, int] = {}
        self.pressure: dict[str, float] = {}  # demand factors from the latency feedback
        self._stability = Stability()
        self._last_tick_s: float | None = None
        self._profiles = profiles
        self.vertical = vertical
        self._profiled_keys: frozenset[str] | None = None
        self.last_plan = ScalingPlan()
        self.ticks = 0
        self._decisions: dict[str, FunctionDecision] = {}
        self._unpriced_said: dict[str, set[str]] = {}  # function → reasons logged already

    def decision(self, function: str) -> FunctionDecision | None:
        """The last plan's decision for `function` (None: never planned, or gone)."""
        return self._decisions.get(function)

    def tick(self) -> ScalingPlan:
        snapshot = self._target.snapshot()
        now = snapshot.now_s
        self._count_arrivals(snapshot.functions, now)
        demand, self._demand = estimate(self._demand, now, self._cfg.demand)
        owned = [f for f in snapshot.functions if f.owner is Owner.AUTOSCALER]
        self._forget_gone({f.name for f in snapshot.functions})
        self._refresh_profiles(owned)
        self._observe(owned)
        idle = [s.idle_cores for s in snapshot.servers if s.idle_cores is not None]
        self._feedback(owned, sum(idle) if idle else None)
        return self._plan(snapshot.pool_view(Owner.AUTOSCALER), demand)

    def plan_for(self, demand: Demand) -> ScalingPlan:
        """Plan for a demand given from outside (the simulator's t = 0 prewarm)."""
        return self._plan(self._target.snapshot().pool_view(Owner.AUTOSCALER), demand)

    def _plan(self, view: PoolView, demand: Demand) -> ScalingPlan:
        """Plan for the demand as the feedback presses it; releases of young instances wait
        until the demand itself (not the pressure) has fallen. Model-less applications'
        demand goes to the variant vertical scaling chose first."""
        if self.vertical is not None:
            view, demand = self.vertical.adjust(view, demand)
        plan = self._policy(view, pressed(demand, self.pressure), self.predictor, self._cfg)
        plan, self._stability = hold(plan, view, demand, self._stability, self._cfg.stability)
        self._log(plan)
        self._record(plan)
        self._target.apply(plan)
        self.last_plan = plan
        self.ticks += 1
        return plan

    def _count_arrivals(self, functions: Sequence[FunctionState], now: float) -> None:
        """Arrivals since the last tick, spread over the time since then."""
        since_s = now - self._cfg.tick_s if self._last_tick_s is None else self._last_tick_s
        self._last_tick_s = now
        names = {f.name for f in functions}
        for name in [n for n in self._seen_arrivals if n not in names]:
            del self._seen_arrivals[name]
            self._demand = forget(self._demand, name)
        for function in functions:
            seen = self._seen_arrivals.get(function.name, 0)
            new = max(0, function.arrivals - seen)
            self._seen_arrivals[function.name] = function.arrivals
            self._demand = record_interval(
                self._demand, function.name, new, since_s, now, self._cfg.demand
            )

    def _feedback(self, owned: Sequence[FunctionState], idle_cores: int | None) -> None:
        """Each owned function's demand factor from its p99 and its refusals this tick. A
        p99 that no answer moved since the last tick is stale (the function gets no
        traffic: a model-less variant moved away from still shows the p99 of its last
        seconds): it counts as unknown, so it cannot press a demand up tick after tick."""
        pressure: dict[str, float] = {}
        for function in owned:
            refused = function.refused - self._seen_refused.get(function.name, function.refused)
            self._seen_refused[function.name] = function.refused
            answered = function.answered - self._seen_answered.get(function.name, 0)
            self._seen_answered[function.name] = function.answered
            factor = next_pressure(
                self.pressure.get(function.name, 1.0),
                function.p99_ms if answered > 0 else None,
                function.view.slo_ms,
                refused,
                self._cfg.feedback,
                idle_cores,
            )
            if factor != self.pressure.get(function.name, 1.0):
                log.info(
                    "autoscaler: %s demand x%.2f (p99 %s ms, %d refused)",
                    function.name,
                    factor,
                    function.p99_ms,
                    refused,
                )
            pressure[function.name] = factor
        self.pressure = pressure

    def _refresh_profiles(self, owned: Sequence[FunctionState]) -> None:
        """Configurations no instance measured are predicted from operator profiles."""
        keys = frozenset(f.view.model_key for f in owned)
        measured = self.predictor
        if self._profiles is None or keys == self._profiled_keys:
            return
        if isinstance(measured, MeasuredPredictor):
            self._profiled_keys = keys
            measured.set_fallback(self._profiles(keys))

    def _observe(self, owned: Sequence[FunctionState]) -> None:
        """Feed the predictor what the ready instances measure now (warm-up timings, then
        the EWMA of their served batches), averaged over instances of one model and cores."""
        measured = self.predictor
        if not isinstance(measured, MeasuredPredictor):
            return
        samples: dict[tuple[str, int, int], dict[int, list[float]]] = {}
        for function in owned:
            for instance in function.measured:
                key = (function.view.model_key, instance.cpus, instance.gpu_pct)
                table = samples.setdefault(key, {})
                for batch_size, exec_ms in instance.exec_ms_by_batch.items():
                    table.setdefault(batch_size, []).append(exec_ms)
        for (model_key, cpus, gpu_pct), table in samples.items():
            means = {b: sum(values) / len(values) for b, values in table.items()}
            measured.observe(model_key, cpus, means, gpu_pct)

    def _record(self, plan: ScalingPlan) -> None:
        """Keep each function's decision; say each new reason it went unpriced, once."""
        for decision in plan.decisions:
            self._decisions[decision.function] = decision
            said = self._unpriced_said.setdefault(decision.function, set())
            for line in decision.unpriced:
                reason = line.partition(": ")[2] or line  # after the configurations it names
                if reason not in said:
                    said.add(reason)
                    log.warning("autoscaler: %s: unpriced %s", decision.function, line)

    def _forget_gone(self, names: set[str]) -> None:
        for name in [n for n in self._decisions if n not in names]:
            del self._decisions[name]
        for name in [n for n in self._unpriced_said if n not in names]:
            del self._unpriced_said[name]
        for seen in (self._seen_refused, self._seen_answered):
            for name in [n for n in seen if n not in names]:
                del seen[name]

    @staticmethod
    def _log(plan: ScalingPlan) -> None:
        for action in plan.actions:
            if isinstance(action, StartInstance):
                log.info(
                    "autoscaler: start %s <b=%d, c=%d, g=%d> for [%.0f, %.0f] rps",
                    action.function,
                    action.config.batch_size,
                    action.config.cpus,
                    action.config.gpu_pct,
                    action.r_low_rps,
                    action.r_up_rps,
                )
            elif isinstance(action, StopInstance):
                log.info("autoscaler: stop %s (%s)", action.instance_id, action.reason)

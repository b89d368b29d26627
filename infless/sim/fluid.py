"""Decisions-level ("fluid") simulation: thousands of servers and instances, in minutes.

The world (`sim.world`) and its control plane are the per-request mode's: the same
autoscaler, prewarm manager, planner and cluster behind the scaling port, planning at the
same ticks. But requests move as counts per `step_s` instead of one event each:

- arrivals: a Poisson count per function and step from its rate schedule;
- dispatch: split over the accepting ready instances by their rate shares (what the
  `RateShareDispatcher` realises over many requests);
- admission: an instance takes, in a step, what it serves in it plus the room up to the
  longest queue a request is still admitted behind (`flow.admissible_queue`, from
  `admission.finish_by_s` and the function's budget, `FunctionLatency`); the rest goes to
  the instances with room left (the router's second choice), then is refused (429);
- service: at most back-to-back full batches (`flow.throughput_rps`); latencies from the
  release rule or the backlog (`flow.latency_ms`), recorded per function (its budget
  steering and p99, as the gateway's) and in a histogram; answers past the SLO are late;
- no ready instance: the count waits (a cold start wakes the function) and is served when
  an instance is ready, late when it waited past its SLO.

Calibrated against the per-request mode on small configurations
(`tests/simulation/test_fluid.py`, `docs/reproduction.md`). Model-less applications run
in the per-request mode only. No processes, no wall clock.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import msgspec
import numpy as np

from infless.modelless.config import ModellessConfig
from infless.scaling.baselines import ScalingPolicy
from infless.scaling.config import ScalingConfig
from infless.scaling.predictors import LatencyPredictor
from infless.sim import flow
from infless.sim.cluster import SimFunction, SimFunctionState
from infless.sim.memory import ModelMemory
from infless.sim.model import SimInstance, SimState
from infless.sim.results import SimResult
from infless.sim.settings import SimConfig, with_sections
from infless.sim.world import World

_SPREAD = (0.125, 0.375, 0.625, 0.875)  # where a step's answers sit between mean and tail
RECORDED = 8  # latencies a function records per step (as if it had answered that many)


class FluidSimulation:
    def __init__(
        self,
        functions: Sequence[SimFunction],
        truth: LatencyPredictor,
        cfg: SimConfig | None = None,
        scaling: ScalingConfig | None = None,
        planner_predictor: LatencyPredictor | None = None,
        policy: ScalingPolicy | None = None,
        memory: dict[str, ModelMemory] | None = None,
        modelless: ModellessConfig | None = None,
    ) -> None:
        cfg = with_sections(cfg or SimConfig(), scaling, modelless)
        self.cfg = cfg = msgspec.structs.replace(cfg, mode="fluid")
        self.world = World(
            functions,
            truth,
            cfg,
            on_start=self._started,
            planner_predictor=planner_predictor,
            policy=policy,
            memory=memory,
        )
        self.functions = self.world.functions
        self.cluster = self.world.cluster
        self.servers = self.world.servers
        self._rng = np.random.default_rng(int(self.world.stream().random() * 2**32))
        self._record_rng = self.world.stream()
        self._pending: list[tuple[float, SimInstance]] = []  # (ready at, instance)
        self._ready_now = False
        self.histogram = flow.LatencyHistogram()
        self._budgets: dict[str, float] = {}
        self._room: dict[str, tuple[float, float, float, int]] = {}  # instance -> cache key, room
        self.requests = self.rejected = 0
        self.late = self.completed = self.served_batches = 0.0

    def _started(self, instance: SimInstance) -> None:
        self.world.started.append(instance)
        delay_s = 0.0 if self._ready_now else self.cfg.cold_start_s
        self._pending.append((self.cluster.now_s + delay_s, instance))

    def run(self) -> SimResult:
        cfg = self.cfg
        step_s, tick_s = cfg.step_s, cfg.scaling.tick_s
        per_tick = max(1, round(tick_s / step_s))
        if cfg.prewarm:
            self._ready_now = True
            self.world.prewarm_plan()
            self._ready_now = False
        steps = math.ceil(cfg.duration_s / step_s)
        for k in range(steps):
            now = k * step_s
            self.cluster.now_s = now
            self._make_ready(now)
            if k % per_tick == 0 and (k > 0 or not cfg.prewarm):
                self.world.tick(now)
                self._make_ready(now)
            for fn in self.functions.values():
                self._step(fn, now, step_s)
        self.cluster.now_s = steps * step_s
        histogram = self.histogram
        return self.world.result(
            self.requests,
            [],
            round(self.late),
            self.rejected,
            round(self.completed),
            max(1, round(self.served_batches)),
            completed=round(self.completed),
            percentiles=(histogram.percentile(0.50), histogram.percentile(0.99)),
        )

    def _make_ready(self, now: float) -> None:
        waiting = [(at, i) for at, i in self._pending if at > now + 1e-9]
        due = [i for at, i in self._pending if at <= now + 1e-9]
        self._pending = waiting
        for instance in due:
            if not self.cluster.ready(instance):
                continue
            fn = self.functions[instance.function]
            while fn.waiting:  # what waited for the function goes into this instance
                arrival_s, _, count = fn.waiting.popleft()
                instance.backlog += count
                waited_ms = (now - arrival_s) * 1000.0
                if waited_ms > fn.spec.slo_ms:
                    self.late += count

    # -- one function, one step -------------------------------------------------------------
    def _step(self, fn: SimFunctionState, now: float, step_s: float) -> None:
        rate = fn.spec.load.rate_at(now + step_s / 2.0)
        arrived = int(self._rng.poisson(rate * step_s)) if rate > 0 else 0
        self.requests += arrived
        if arrived:
            fn.arrive(now, arrived)
        ready = fn.ready
        budget_s = fn.latency.budget_ms(now, 0.0) / 1000.0
        if arrived and not ready:
            fn.waiting.append((now, math.inf, float(arrived)))
            if not fn.starting:
                self.cluster.wake(fn)
        elif arrived:
            self._admit(fn, float(arrived), now, step_s, budget_s)
        self._serve(fn, now, step_s, budget_s)

    def _admit(
        self, fn: SimFunctionState, arrived: float, now: float, step_s: float, budget_s: float
    ) -> None:
        accepting = [i for i in fn.ready if i.accepting]
        total_share = sum(max(i.share_rps, 1e-9) for i in accepting)
        overflow = arrived if not accepting else 0.0
        room: dict[str, float] = {}
        for instance in accepting:
            offered = arrived * max(instance.share_rps, 1e-9) / total_share
            space = self._room_for(instance, budget_s, step_s)
            taken = min(offered, space)
            instance.offered += taken
            room[instance.instance_id] = space - taken
            overflow += offered - taken
        if overflow > 1e-9:  # the router's second choice: whoever has room, soonest first
            for instance in sorted(accepting, key=lambda i: i.backlog):
                if overflow <= 1e-9:
                    break
                taken = min(overflow, room[instance.instance_id])
                instance.offered += taken
                overflow -= taken
        refused = round(overflow)
        if refused > 0:
            self.rejected += refused
            fn.refused += refused
            fn.finish(now, refused)

    def _room_for(self, instance: SimInstance, budget_s: float, step_s: float) -> float:
        """What the instance can take in a step: what it serves plus the room to the queue
        a request is still admitted behind (cached while the budget and its tail hold)."""
        model, settings = instance.model, instance.settings
        assert model is not None
        assert settings is not None
        key = (round(budget_s, 4), round(model.tail_ratio, 3), round(model.level, 3))
        cached = self._room.get(instance.instance_id)
        if cached is None or cached[:3] != key:
            limit = flow.admissible_queue(model, budget_s, settings.capacity)
            cached = (*key, limit)
            self._room[instance.instance_id] = cached
        serves = flow.throughput_rps(model, settings.batch_size) * step_s
        return max(0.0, cached[3] - instance.backlog) + serves

    def _serve(self, fn: SimFunctionState, now: float, step_s: float, budget_s: float) -> None:
        slo_ms = fn.spec.slo_ms
        points: list[tuple[float, float, float]] = []  # (answered, mean, tail) per instance
        for instance in list(fn.instances.values()):
            if instance.state not in (SimState.READY, SimState.DRAINING):
                continue
            offered, instance.offered = instance.offered, 0.0
            work = instance.backlog + offered
            if work <= 1e-9:
                if instance.state is SimState.DRAINING:
                    self.cluster.finish(instance)
                continue
            model, settings = instance.model, instance.settings
            assert model is not None
            assert settings is not None
            rate_rps = offered / step_s
            mean, tail = flow.latency_ms(model, settings, rate_rps, instance.backlog, budget_s)
            capacity = flow.throughput_rps(model, settings.batch_size) * step_s
            served = min(work, capacity)
            instance.backlog = work - served
            self._answered(served, mean, tail, slo_ms)
            points.append((served, mean, tail))
            k = (
                settings.batch_size
                if instance.backlog >= 1.0
                else flow.operating_batch(model, settings, rate_rps)
            )
            batches = served / k
            model.observe(k, model.mean_ms(k))
            instance.served += served
            instance.batches += batches
            instance.exec_ms_total += batches * model.mean_ms(k)
            instance.last_active_s = now
            self.served_batches += batches
            fn.finish(now, served)
            if instance.state is SimState.DRAINING and instance.backlog <= 1e-9:
                self.cluster.finish(instance)
        if points:
            _record(fn, now, points, self._record_rng)

    def _answered(self, count: float, mean: float, tail: float, slo_ms: float) -> None:
        """A step's answers of one instance, spread between its mean and tail latency."""
        if count <= 0:
            return
        self.completed += count
        share = count / len(_SPREAD)
        for latency in _spread(mean, tail):
            self.histogram.add(latency, share)
            if latency > slo_ms + 1e-6:
                self.late += share


def _spread(mean: float, tail: float) -> list[float]:
    low = max(0.0, 2.0 * mean - tail)
    return [low + position * (tail - low) for position in _SPREAD]


def _record(
    fn: SimFunctionState, now: float, points: list[tuple[float, float, float]], rng: random.Random
) -> None:
    """The function's latency record (its budget steering, its p99) as the gateway would
    see the step's answers: `RECORDED` latencies drawn from them — an instance by its share
    of the answers, then a latency between its mean and tail."""
    weights = [count for count, _, _ in points]
    if sum(weights) <= 0:
        return
    for count, mean, tail in rng.choices(points, weights, k=RECORDED):
        del count
        low = max(0.0, 2.0 * mean - tail)
        fn.latency.answered_in(now, low + rng.random() * (max(tail, mean) - low), 0.0)

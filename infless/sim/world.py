"""`World`: what both simulation modes share.

It holds the simulated servers and functions, the cluster behind the scaling port, and the
server's own control plane driving it:

- the `Autoscaler`, with the configured policy (or INFless's Algorithm 1);
- the `PrewarmManager`, for scale-to-zero functions;
- model-less applications' vertical scaling (`control.vertical.VerticalScaling`) and the
  `VariantMonitor`.

These are the very classes `infless serve` constructs (`app.build_platform`), given the
sections of `SimConfig` that `config.toml` would give them.

The engines move requests (`sim.engine`: one event per request; `sim.fluid`: counts per
step). The world plans (`tick`), monitors (`monitor`), samples what the cluster holds
(`sim.usage`) and builds the result.

Simulation only: no I/O, no clock (the engines set `cluster.now_s`). The policy's wall time
is measured (`usage.TimedPolicy`), never used.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping, Sequence

from infless.coldstart.policies import build_policy
from infless.control.autoscaler import Autoscaler
from infless.control.desired import DesiredState, Owner
from infless.control.prewarm import PrewarmManager
from infless.control.variant_monitor import VariantMonitor
from infless.dataplane.latency import FunctionLatency
from infless.scaling.baselines import ScalingPolicy, get_policy
from infless.scaling.demand import Demand
from infless.scaling.predictors import CachedPredictor, LatencyPredictor
from infless.scaling.view import ScalingPlan
from infless.sim.cluster import SimCluster, SimFunction, SimFunctionState
from infless.sim.memory import ModelMemory
from infless.sim.model import SimInstance, SimServer
from infless.sim.modelless import ProfilePredictor, SimApp, SimApps
from infless.sim.results import SimResult, core_seconds, percentile
from infless.sim.settings import SimConfig, server_shape
from infless.sim.usage import TimedPolicy, UsageMeter
from loadgen.arrivals import poisson_arrivals as arrivals


class World:
    def __init__(
        self,
        functions: Sequence[SimFunction],
        truth: LatencyPredictor,
        cfg: SimConfig,
        on_start: Callable[[SimInstance], None],
        planner_predictor: LatencyPredictor | None = None,
        policy: ScalingPolicy | None = None,
        apps: Sequence[SimApp] = (),
        memory: Mapping[str, ModelMemory] | None = None,
    ) -> None:
        """`apps`: model-less applications, each deployed as one function per ready variant;
        their variants' latency (truth and plan) is their profiles' (`ProfilePredictor`)."""
        self.cfg = cfg
        planner_predictor = planner_predictor or truth
        if apps:
            profiles = [p for app in apps for p in app.ready]
            truth = ProfilePredictor(profiles, truth)
            planner_predictor = ProfilePredictor(profiles, planner_predictor)
        self.truth = CachedPredictor(truth)
        self.planner_predictor = CachedPredictor(planner_predictor)
        self.rng = random.Random(cfg.seed)
        self.servers = [SimServer(f"s{k:04d}", *server_shape(cfg, k)) for k in range(cfg.servers)]
        self.functions = {
            f.name: self._state(f, arrivals(f.load, cfg.duration_s, self.stream()))
            for f in functions
        }
        self.modelless_apps = SimApps(apps, cfg.modelless, cfg.scaling.demand)
        for app in apps:
            for spec in self.modelless_apps.add(
                app, arrivals(app.load, cfg.duration_s, self.stream())
            ):
                if spec.name in self.functions:
                    raise ValueError(f"{spec.name!r}: a function and a variant of {app.model!r}")
                self.functions[spec.name] = self._state(spec, iter(()))
        self.cluster = SimCluster(
            self.functions,
            self.servers,
            scaling=cfg.scaling,
            batching=cfg.batching,
            planner=self.planner_predictor,
            truth=self.truth,
            on_start=on_start,
            store_affinity=cfg.store_affinity,
            memory=memory,
        )
        self.timed = TimedPolicy(policy or get_policy(cfg.scaling.policy))
        self.autoscaler = Autoscaler(
            self.cluster,
            cfg.scaling,
            self.planner_predictor,
            self.timed,
            vertical=self.modelless_apps.planner,
        )
        self.prewarm: PrewarmManager | None = None
        if any(f.scale_to_zero for f in functions):
            coldstart = cfg.coldstart
            self.prewarm = PrewarmManager(
                self.cluster,
                build_policy(coldstart.policy, coldstart.params),
                coldstart.release_grace_s,
                scale_to_zero_default=False,
            )
        self.monitor = VariantMonitor(self.cluster, self.modelless_apps.catalog, cfg.modelless)
        self.usage = UsageMeter(memory or {})
        self.started: list[SimInstance] = []  # every instance, in the order they started
        self.plans = self.unmet_ticks = self.peak_instances = 0
        self.core_seconds = 0.0

    def _state(self, spec: SimFunction, times: Iterable[float]) -> SimFunctionState:
        latency = FunctionLatency(spec.slo_ms, self.cfg.batching.tail_quantile)
        return SimFunctionState(spec, iter(times), DesiredState(Owner.AUTOSCALER), latency)

    def stream(self) -> random.Random:
        """A random stream of its own for one part of the run (reproducible by seed)."""
        return random.Random(self.rng.random())

    # -- control ----------------------------------------------------------------------------
    def prewarm_plan(self) -> None:
        """Plan for the t = 0 rates at t = 0 (the engine makes those instances ready)."""
        rates = {n: f.spec.load.rate_at(0.0) for n, f in self.functions.items()}
        rates.update(self.modelless_apps.prewarm_rates())
        self._planned(self.autoscaler.plan_for(Demand(rates)))

    def tick(self, now_s: float) -> None:
        """One scaling tick: the autoscaler, the prewarm manager, and what the cluster holds."""
        self._planned(self.autoscaler.tick())
        if self.prewarm is not None:
            self.prewarm.tick()
        tick_s = self.cfg.scaling.tick_s
        self.core_seconds += self.cluster.used_cores * tick_s
        self.usage.sample(self.servers, self._holding(), tick_s)

    def _holding(self) -> Iterable[SimInstance]:
        for fn in self.functions.values():
            yield from fn.instances.values()

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

    # -- the result -------------------------------------------------------------------------
    def result(
        self,
        requests: int,
        latencies_ms: list[float],
        late: int,
        rejected: int,
        served: int,
        batches: int,
        completed: int | None = None,
        percentiles: tuple[float, float] | None = None,
    ) -> SimResult:
        """The run's result; the fluid mode gives the count of answers (`completed`) and
        their p50 and p99 (`percentiles`) instead of every latency."""
        latencies = sorted(latencies_ms)
        p50_ms, p99_ms = percentiles or (percentile(latencies, 0.50), percentile(latencies, 0.99))
        unserved = round(sum(f.waiting_count for f in self.functions.values()))
        cfg = self.cfg
        return SimResult(
            policy=cfg.scaling.policy,
            servers=len(self.servers),
            duration_s=cfg.duration_s,
            requests=requests,
            completed=len(latencies) if completed is None else completed,
            late=late,
            rejected=rejected,
            unserved=unserved,
            p50_ms=p50_ms,
            p99_ms=p99_ms,
            mean_batch=served / batches if batches else 0.0,
            instance_starts=self.cluster.starts,
            instance_stops=self.cluster.stops,
            peak_instances=self.peak_instances,
            core_seconds=self.core_seconds,
            capacity_overruns=sum(s.overruns for s in self.servers),
            unmet_ticks=self.unmet_ticks,
            plans=self.plans,
            configs=dict(self.cluster.configs),
            apps={
                m: a.result(self.functions, self.started, cfg.duration_s)
                for m, a in self.modelless_apps.runs.items()
            },
            usage=self.usage.usage(self.timed),
            mode=cfg.mode,
        )

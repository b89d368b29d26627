"""Model-less applications in the simulator (INFaaS on INFless's machinery).

A `SimApp` is one application of a registered model: its ready variants' profiles, the
model's SLO and its arrivals. The simulation deploys what registration deploys on a
server: one function per ready variant (`variant_function(model, variant)`, model key
`model/variant`, no instance until the planner or a query starts one) and one
`ModelEntry` in a `ModellessCatalog`. It runs the server's vertical-scaling shell
(`control.vertical.VerticalScaling`: the pure planner's decisions, applied to the
catalogue) inside the same `Autoscaler`. Each arrival of the application picks its
variant with `catalog.choose`, then takes exactly the path an arrival of that function
takes. Every `monitor_s` the server's own `VariantMonitor` updates the variants' states
from what their instances did, read through the scaling port (`sim.world` runs it).

`ProfilePredictor` is the variants' latency: the profile's measured points (linear
between profiled batch sizes, the last slope beyond the largest, the nearest profiled
core count). The engine uses it both as the truth and as the planner's predictor of
those keys. Simulation only: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from infless.control.vertical import VerticalScaling
from infless.errors import GoalsUnmet
from infless.modelless.catalog import GOAL_HEADERS, ModelEntry, ModellessCatalog
from infless.modelless.config import ModellessConfig
from infless.modelless.overflow import overflow_card
from infless.modelless.profiles import Goals, VariantProfile, variant_function
from infless.modelless.vertical import AppLoad, Hold, decide
from infless.scaling.config import DemandConfig
from infless.scaling.predictors import LatencyPredictor
from infless.sim.cluster import SimFunction, SimFunctionState
from infless.sim.model import SimInstance
from infless.sim.results import AppResult, core_seconds, percentile
from infless.sim.workload import RateSchedule, constant


@dataclass(frozen=True, slots=True)
class SimApp:
    """One model-less application: every query of it carries `goals` (None: the model's
    defaults, the SLO as the latency bound)."""

    model: str
    slo_ms: float
    max_batch: int
    profiles: tuple[VariantProfile, ...]  # the model's variants (only ready ones are deployed)
    load: RateSchedule
    goals: Goals | None = None

    @property
    def ready(self) -> tuple[VariantProfile, ...]:
        return tuple(p for p in self.profiles if p.status == "ready")


def variant_key(model: str, variant: str) -> str:
    """The model key a variant's function runs under (what `ProfilePredictor` answers)."""
    return f"{model}/{variant}"


def variant_functions(app: SimApp) -> tuple[SimFunction, ...]:
    """What registration deploys: one function per ready variant, no arrivals of its own,
    no instance until the planner or a query starts one."""
    return tuple(
        SimFunction(
            name=variant_function(app.model, p.name),
            model_key=variant_key(app.model, p.name),
            slo_ms=app.slo_ms,
            max_batch=app.max_batch,
            load=constant(0.0),
            min_instances=0,
        )
        for p in app.ready
    )


APP_ID = "app"  # the id a `SimApp` with goals is registered under in its model's entry


def model_entry(app: SimApp) -> ModelEntry:
    """The catalogue entry registration publishes: the ready variants' profiles, and the
    application's goals when it has its own."""
    apps = {APP_ID: app.goals} if app.goals is not None else {}
    return ModelEntry(model=app.model, slo_ms=app.slo_ms, profiles=app.ready, apps=apps)


def goal_headers(goals: Goals | None) -> dict[str, str] | None:
    """What each query of the application carries (`catalog.GOAL_HEADERS`): its registered
    application's id, so its goals apply (None: the model's defaults)."""
    return None if goals is None else {GOAL_HEADERS["app"]: APP_ID}


# -- latency from profiles ------------------------------------------------------------------
class ProfilePredictor:
    """Variants' latency from their profiles (keys `model/variant`); any other key goes to
    `fallback`. CPU only: a GPU share is infeasible (`LookupError`)."""

    def __init__(
        self, profiles: Iterable[VariantProfile], fallback: LatencyPredictor | None = None
    ) -> None:
        self._profiles = {variant_key(p.model, p.name): p for p in profiles if p.latency}
        self._fallback = fallback

    def predict_latency_ms(
        self, model_key: str, batch_size: int, cpus: int, gpu_pct: int = 0
    ) -> float:
        profile = self._profiles.get(model_key)
        if profile is None:
            if self._fallback is None:
                raise LookupError(f"no profile for {model_key!r}")
            return self._fallback.predict_latency_ms(model_key, batch_size, cpus, gpu_pct)
        if gpu_pct > 0:
            raise LookupError(f"{model_key!r}: profiled on CPUs only")
        return profile.exec_ms(batch_size, cpus)


def first_target(entry: ModelEntry, rate_rps: float, cfg: ModellessConfig) -> str | None:
    """The variant function vertical scaling starts an application on at `rate_rps` (what a
    prewarmed simulation plans for at t = 0): `vertical.decide` with nothing running, and
    the overflow variant the planner keeps (it starts there while the tail is unmeasured)."""
    spare = overflow_card(entry.catalogue.cards, entry.planning_goals) if cfg.overflow else None
    load = AppLoad(
        model=entry.model,
        goals=entry.default_goals,
        cards=entry.catalogue.cards,
        live={},
        load_rps=rate_rps,
        overflow=spare.name if spare is not None else None,
    )
    target = decide(load, None, Hold(), cfg).target
    card = entry.card(target) if target is not None else None
    return card.function if card is not None else None


# -- one application in a run ---------------------------------------------------------------
@dataclass(eq=False)
class AppRun:
    """What the engine keeps of one application while it runs."""

    spec: SimApp
    catalog: ModellessCatalog  # the application's entry is read from it (`entry`)
    arrivals: Iterator[float]
    headers: dict[str, str] | None
    variants: dict[str, str]  # variant function -> variant name
    profiles: dict[str, VariantProfile]  # by variant name
    requests: int = 0
    late: int = 0
    rejected: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    by_variant: Counter[str] = field(default_factory=Counter)
    answered: Counter[str] = field(default_factory=Counter)
    by_second: dict[int, Counter[str]] = field(default_factory=dict)
    moves: list[tuple[float, str, str]] = field(default_factory=list)
    switches_seen: int = 0

    @staticmethod
    def of(spec: SimApp, catalog: ModellessCatalog, arrivals: Iterator[float]) -> AppRun:
        ready = spec.ready
        return AppRun(
            spec=spec,
            catalog=catalog,
            arrivals=arrivals,
            headers=goal_headers(spec.goals),
            variants={variant_function(spec.model, p.name): p.name for p in ready},
            profiles={p.name: p for p in ready},
        )

    @property
    def entry(self) -> ModelEntry:
        """The application's catalogue entry as the control shell last published it."""
        entry = self.catalog.get(self.spec.model)
        if entry is None:
            raise LookupError(f"model {self.spec.model!r} is not in the catalogue")
        return entry

    def routed(self, variant: str, now_s: float) -> None:
        self.by_variant[variant] += 1
        self.by_second.setdefault(int(now_s), Counter())[variant] += 1

    def served(self, function: str, batch: Sequence[float], exec_ms: float, now_s: float) -> None:
        """A batch of its variant `function` finished at `now_s`."""
        slo_ms = self.spec.slo_ms
        for arrival_s in batch:
            latency_ms = (now_s - arrival_s) * 1000.0
            self.latencies_ms.append(latency_ms)
            if latency_ms > slo_ms + 1e-6:
                self.late += 1
        self.answered[self.variants[function]] += len(batch)

    # -- results ----------------------------------------------------------------------------
    def note_moves(self, move: str | None, target: str | None, now_s: float) -> None:
        """After a planning pass: record a vertical move when the switch count grew."""
        if self.entry.switches != self.switches_seen:
            self.switches_seen = self.entry.switches
            self.moves.append((now_s, move or "?", target or "-"))

    def result(
        self,
        functions: Mapping[str, SimFunctionState],
        started: Iterable[SimInstance],
        duration_s: float,
    ) -> AppResult:
        """`started`: every instance the run started (its variants' are counted)."""
        latencies = sorted(self.latencies_ms)
        accuracy = {c.name: c.accuracy for c in self.entry.catalogue.cards}
        answered = sum(self.answered.values())
        weighted = sum(accuracy.get(v, math.nan) * n for v, n in self.answered.items())
        unserved = round(sum(functions[f].waiting_count for f in self.variants if f in functions))
        return AppResult(
            model=self.spec.model,
            slo_ms=self.spec.slo_ms,
            requests=self.requests,
            completed=len(latencies),
            late=self.late,
            rejected=self.rejected,
            unserved=unserved,
            p99_ms=percentile(latencies, 0.99),
            mean_accuracy=weighted / answered if answered else 0.0,
            core_seconds=core_seconds(
                (i for i in started if i.function in self.variants), duration_s
            ),
            switches=self.entry.switches,
            by_variant=dict(self.by_variant),
            answered_by_variant=dict(self.answered),
            by_second={s: dict(c) for s, c in sorted(self.by_second.items())},
            moves=tuple(self.moves),
            duration_s=duration_s,
        )


class SimApps:
    """The model-less side of one simulation: its applications, their catalogue, the
    vertical planner the autoscaler runs, the monitor's windows and the t = 0 targets."""

    def __init__(self, apps: Sequence[SimApp], cfg: ModellessConfig, demand: DemandConfig) -> None:
        self.cfg = cfg
        self.catalog = ModellessCatalog()
        self.runs: dict[str, AppRun] = {}  # by model
        self.of_function: dict[str, AppRun] = {}  # variant function -> its application
        self.planner = VerticalScaling(self.catalog, cfg, demand) if apps else None

    def add(self, app: SimApp, arrivals: Iterator[float]) -> tuple[SimFunction, ...]:
        """Register `app`; returns the variant functions the simulation must deploy."""
        if app.model in self.runs:
            raise ValueError(f"model {app.model!r}: one application per model")
        self.catalog.publish(model_entry(app))
        run = AppRun.of(app, self.catalog, arrivals)
        self.runs[app.model] = run
        functions = variant_functions(app)
        for spec in functions:
            self.of_function[spec.name] = run
        return functions

    def prewarm_rates(self) -> dict[str, float]:
        """The t = 0 rate of each application, on the variant vertical scaling starts it on."""
        rates: dict[str, float] = {}
        for run in self.runs.values():
            rate = run.spec.load.rate_at(0.0)
            target = first_target(run.entry, rate, self.cfg) if rate > 0 else None
            if target is not None:
                rates[target] = rate
        return rates

    def choose(
        self,
        run: AppRun,
        now_s: float,
        has_room: Callable[[str, float], bool] | None = None,
        spill_share: float = 1.0,
    ) -> tuple[str, bool] | None:
        """A query of `run`: the variant function it goes to, and whether it is held to the
        SLO (`catalog.Chosen.held`); None: no variant meets its goals, the query is
        refused. `has_room(function, share)`: whether that variant
        function would serve the query within `share` of the SLO now; a query its selected
        variant would not serve within `spill_share` spills over to another running variant
        that would (`catalog.choose`), as on the server."""
        run.requests += 1
        room = None if has_room is None else (lambda card, share: has_room(card.function, share))
        try:
            chosen = self.catalog.choose(run.spec.model, run.headers, room, spill_share)
        except GoalsUnmet:
            chosen = None
        if chosen is None:
            run.rejected += 1
            return None
        run.routed(chosen.card.name, now_s)
        return chosen.card.function, chosen.held

    def planned(self, now_s: float) -> None:
        """After a plan: each application's vertical move, if any."""
        if self.planner is None:
            return
        for model, run in self.runs.items():
            decision = self.planner.decisions.get(model)
            move = decision.move if decision is not None else None
            run.note_moves(move, run.entry.target, now_s)

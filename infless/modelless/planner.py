"""`ModellessPlanner`: model-vertical scaling inside the autoscaler's planning pass.

At each tick, before Algorithm 1 plans, the autoscaler hands the pool view and the demand
estimate here. For every registered model whose variant functions are in the view, the
planner measures the application's load (one estimate of its queries, less what queries
pinned to a variant bring there), lets `vertical.decide` pick the variant that carries it
under the loosest goals of its applications,
records that target in the catalogue (per-query selection prefers it), moves the demand
there (`vertical.retarget`), and marks the other variants as not to be kept warm (until
the monitor has seen the target serving, those running keep their demand but may not
grow, and give up the cores the target's first instances need: the weakest wholly, the
one carrying the most — the bridge — down to one instance; those with no instance stay
without) — so
Algorithm 1, planning every variant function like any function, replicates the target
(horizontal scaling, with its own <b, c> choice) and releases what no longer carries load
once the target serves (at once: they are marked `retired`, which the scaling stability does
not hold back). With `[modelless] overflow`, one variant is not let go: the
cheapest per request meeting the goals (`vertical.overflow_card`) stays warm beside the
target with the demand it serves — the queries the target has no room for spill over to
it at admission (`catalog.choose`) — and it starts once the target serves. The same object
runs on the server and in the simulator.
Pure apart from the catalogue it writes: no I/O, no clock.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace

from infless.modelless.cards import VariantCard, sustained_qps
from infless.modelless.catalog import ModelEntry, ModellessCatalog
from infless.modelless.config import ModellessConfig
from infless.modelless.states import VariantState
from infless.modelless.vertical import (
    AppLoad,
    Hold,
    VerticalDecision,
    decide,
    overflow_card,
    retarget,
)
from infless.scaling.config import DemandConfig
from infless.scaling.demand import Demand, DemandState, estimate, record_interval
from infless.scaling.view import FunctionView, InstanceState, PoolView

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Pass:
    """One planning pass: what it reads, and which variant functions it lets go."""

    functions: dict[str, FunctionView]
    counted: Demand  # the applications' and pinned queries' arrival rates
    rates: dict[str, float]  # the demand Algorithm 1 plans with (written)
    free: int | None  # free cores on the servers
    now_s: float
    cold: set[str] = field(default_factory=set)  # variants no longer wanted warm
    frozen: dict[str, int] = field(default_factory=dict)  # serving on, at most this many


class ModellessPlanner:
    def __init__(
        self, catalog: ModellessCatalog, cfg: ModellessConfig, demand_cfg: DemandConfig
    ) -> None:
        self._catalog = catalog
        self._cfg = cfg
        self._demand_cfg = demand_cfg
        self._counts = DemandState()
        self._seen: dict[str, int] = {}
        self._holds: dict[str, Hold] = {}
        self._pending: dict[str, tuple[str, float]] = {}  # model -> (new target, since)
        self._last_s: float | None = None
        self.decisions: dict[str, VerticalDecision] = {}

    def adjust(self, view: PoolView, demand: Demand, tick_s: float) -> tuple[PoolView, Demand]:
        """The view and demand Algorithm 1 should plan with (see the module docstring)."""
        if not self._catalog:
            return view, demand
        now = view.now_s
        since = now - tick_s if self._last_s is None else self._last_s
        self._last_s = now
        functions = {f.name: f for f in view.functions}
        rates = dict(demand.rates_rps)
        free = sum(s.free_cpus for s in view.servers) if view.servers else None
        entries = [e for e in self._catalog.entries()
                   if any(c.function in functions for c in e.catalogue.cards)]  # fmt: skip
        tick = _Pass(functions, self._count(entries, since, now), rates, free, now)
        for entry in entries:
            self._plan(entry, tick)
        out = []
        for function in view.functions:
            if function.name in tick.cold:
                # not kept warm, and its releases are not held back (stability.hold)
                function = replace(  # noqa: PLW2901
                    function, keep_warm=False, min_instances=0, retired=True
                )
            elif function.name in tick.frozen:
                cap = min(function.max_instances, max(1, tick.frozen[function.name]))
                function = replace(function, max_instances=cap)  # noqa: PLW2901
            out.append(function)
        return replace(view, functions=tuple(out)), Demand(rates)

    def _plan(self, entry: ModelEntry, tick: _Pass) -> None:
        """One application: its decision, its variants' demand in `tick.rates`, and which of
        them go `cold` or stay `frozen` at a size (see the module docstring)."""
        functions, counted, rates, free = tick.functions, tick.counted, tick.rates, tick.free
        cold, frozen = tick.cold, tick.frozen
        present = [c for c in entry.catalogue.cards if c.function in functions]
        app_rps = counted.rate_rps(_app_key(entry.model))
        if entry.arrivals == 0:  # no query yet: a demand handed in from outside (the
            # simulator's t = 0 prewarm) is on the variants' own rates
            app_rps = max(rates.get(c.function, 0.0) for c in present)
        pinned = {c.name: counted.rate_rps(_pinned_key(c.function)) for c in present}
        live = {c.name: _live(functions[c.function]) for c in present}
        keep = self._overflow(entry, present)
        decision = self._decide(entry, live, app_rps, pinned, free, tick.now_s, keep)
        if decision.target is None:
            return
        if keep == decision.target:
            keep = None  # the target is the overflow variant: nothing else to keep
        # the target serves (Active, or busy: then more of it needs the others' cores)
        serving = entry.states.get(decision.target, VariantState.INACTIVE)
        target_serving = serving is not VariantState.INACTIVE
        moved = retarget(
            app_rps, {c.name: rates.get(c.function, 0.0) for c in present}, pinned,
            decision.target, target_serving, [c.name for c in present],
        )  # fmt: skip
        # cores the target's new instances need beyond what is free
        target_card = entry.card(decision.target)
        wanted = next((o.instances for o in decision.options
                       if o.card.name == decision.target), 1)  # fmt: skip
        short = 0
        if target_card is not None and free is not None:
            missing = max(0, wanted - live.get(decision.target, 0)) * target_card.cpus
            short = max(0, missing - free)
        own = {c.name: rates.get(c.function, 0.0) for c in present}
        for card in present:
            rates[card.function] = moved[card.name]
        if target_serving:
            let_go = [c for c in present if c.name not in (decision.target, keep)]
            cold.update(c.function for c in let_go)
            entry.released = frozenset(c.name for c in let_go)
            if keep is not None:  # warm, with what spills over to it
                card = next(c for c in present if c.name == keep)
                rates[card.function] = max(moved[keep], own[keep])
            return
        # until the target serves, the variants it replaces give up the cores its new
        # instances need beyond what is free: the weakest first and wholly, the one
        # carrying the most (the bridge) and the overflow variant down to one instance
        others = [c for c in present if c.name != decision.target]
        others.sort(key=lambda c: live[c.name] * sustained_qps(c, entry.capacity.factor(c.name)))
        for index, card in enumerate(others):
            floor = 1 if index == len(others) - 1 or card.name == keep else 0
            give = max(0, min(live[card.name] - floor, -(-short // card.cpus)))
            short -= give * card.cpus
            if live[card.name] - give <= 0:
                cold.add(card.function)
                rates[card.function] = pinned.get(card.name, 0.0)
            else:
                frozen[card.function] = live[card.name] - give
        entry.released = frozenset(c.name for c in others if c.function in cold)

    def _overflow(self, entry: ModelEntry, present: list[VariantCard]) -> str | None:
        """The variant kept warm beside the target (`vertical.overflow_card`), if the
        `[modelless] overflow` setting asks for one."""
        card = overflow_card(present, entry.planning_goals) if self._cfg.overflow else None
        entry.overflow = card.name if card is not None else None
        return entry.overflow

    def _count(self, entries: list[ModelEntry], since: float, now: float) -> Demand:
        """One arrival-rate estimate per application and per variant's pinned queries, from
        the catalogue's counters (the same estimator as any function's demand)."""
        for entry in entries:
            counters = {_app_key(entry.model): entry.arrivals}
            for card in entry.catalogue.cards:
                counters[_pinned_key(card.function)] = entry.pinned.get(card.name, 0)
            for key, count in counters.items():
                new = max(0, count - self._seen.get(key, 0))
                self._seen[key] = count
                self._counts = record_interval(self._counts, key, new, since, now, self._demand_cfg)
        estimated, self._counts = estimate(self._counts, now, self._demand_cfg)
        return estimated

    def _settled(self, entry: ModelEntry, current: str | None, now_s: float) -> bool:
        """Whether the application's last move has landed: its new variant serves (the
        monitor saw it), or it has had `settle_s` to do so (a start that fails must not
        pin the application)."""
        pending = self._pending.get(entry.model)
        if pending is None or pending[0] != current:
            return True
        serving = entry.states.get(pending[0], VariantState.INACTIVE) is not VariantState.INACTIVE
        if serving or now_s - pending[1] > self._cfg.settle_s:
            del self._pending[entry.model]
            return True
        return False

    def _decide(
        self,
        entry: ModelEntry,
        live: dict[str, int],
        app_rps: float,
        pinned: dict[str, float],
        free_cpus: int | None,
        now_s: float,
        overflow: str | None,
    ) -> VerticalDecision:
        load = AppLoad(
            model=entry.model,
            goals=entry.planning_goals,
            cards=entry.catalogue.cards,
            live=live,
            load_rps=max(0.0, app_rps - sum(pinned.values())),
            free_cpus=free_cpus,
            capacity=entry.capacity,
            overflow=overflow,
        )
        current = entry.target
        if current is None:  # nothing chosen yet: the variant running the most, if any
            running = [name for name, n in live.items() if n > 0]
            current = max(running, key=lambda n: live[n]) if running else None
        hold = self._holds.get(entry.model, Hold())
        settled = self._settled(entry, current, now_s)
        decision = decide(load, current, hold, self._cfg, settled)
        self._holds[entry.model] = decision.hold
        self.decisions[entry.model] = decision
        if decision.target is not None and decision.target != current:
            self._pending[entry.model] = (decision.target, now_s)
        log.debug(
            "modelless: %s at %.1f rps: %s %s (hold %s)", entry.model, load.load_rps,
            decision.move, decision.target, decision.hold,
        )  # fmt: skip
        if decision.move in ("upgrade", "downgrade"):
            entry.switches += 1
            log.info(
                "modelless: %s %s %s -> %s at %.1f rps (capacity factors %s, host %.2f)",
                entry.model, decision.move, decision.previous, decision.target, load.load_rps,
                {k: round(v, 2) for k, v in entry.capacity.own.items()}, entry.capacity.host,
            )  # fmt: skip
        entry.target = decision.target
        return decision


def _app_key(model: str) -> str:
    return f"app:{model}"


def _pinned_key(function: str) -> str:
    return f"pinned:{function}"


def _live(function: FunctionView) -> int:
    return sum(1 for i in function.instances if i.state is not InstanceState.DRAINING)


def _ready(function: FunctionView) -> int:
    return sum(1 for i in function.instances if i.state is InstanceState.READY)

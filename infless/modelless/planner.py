"""`plan_vertical`: model-vertical scaling as a pure function of (catalogue snapshot, pool
view, demand, clock reading). It returns decisions; it writes nothing.

At each tick, before Algorithm 1 plans, the control shell (`control.vertical`) hands the
catalogue's snapshot, the pool view and the demand estimate here. For every registered
model whose variant functions are in the view, the planner:

- measures the model's load (`modelless.app_demand`): one estimate of its queries, less
  what queries pinned to a variant bring there — the measured rate for the variant
  decision, the planning rate (ahead of a rise, `scaling.demand`) for the demand it hands
  Algorithm 1: a step read at three times its rate would otherwise switch to a faster
  variant the load does not need;
- lets `vertical.decide` pick the variant that carries it under the loosest goals of its
  applications (the target; per-query selection prefers it);
- moves the demand there (`vertical.retarget`);
- marks the other variants as not to be kept warm.

Until the target serves and its ready instances carry the load, the variants it replaces
keep their demand but may not grow, and take the queries it has no room for (spill-over).
With no core free for the target's next instance, that lasts only while they serve about
as much per core as the target would (`capacity.outserves`, at the host's speed): under a
load no variant carries on the cores there are, the target never carries it, and a slower
variant bridged on through a live peak, refusing most of what selection sent it while
the target, on its cores, would have served three times as much.
They give up the cores the target's new instances need: the weakest wholly, the one
carrying the most (the bridge) down to one instance while the target serves nothing yet.
Those with no instance stay without. Once the target carries the load, the others are let
go at once: they are marked `retired`, which the scaling stability does not hold back.

With `[modelless] overflow`, one variant is not let go: the cheapest per request that
meets the goals (`overflow.overflow_card`). It stays warm beside the target with the
demand it serves (queries the target has no room for spill over to it at admission,
`catalog.choose`), and it starts once the target serves.

`adjusted` turns a plan into the view and demand Algorithm 1 plans with. In it, the
cores of a variant let go with no demand left count as free, so that the target's next
instance starts in the pass that stops the old one, not a tick later (a fixed deployment
at a step has a free core; model-less would otherwise wait for the old variant's to come
back). Each such instance's cores count once (`PlannerMemory.handed`): one that outlives
the pass that should have stopped it does not have its core handed out again in every
pass (on the gateway that once put seven instances on two cores). The same functions run
on the server and in the simulator. No I/O, no clock, no mutation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from infless.modelless.app_demand import app_key, count_arrivals, pinned_key
from infless.modelless.capacity import Capacity, instance_qps_here, outserves, qps_here
from infless.modelless.cards import VariantCard
from infless.modelless.catalog import ModelReading
from infless.modelless.config import ModellessConfig
from infless.modelless.decisions import AppDecision, PlannerMemory, VerticalPlan
from infless.modelless.entry import ModelEntry
from infless.modelless.overflow import overflow_card
from infless.modelless.states import VariantState
from infless.modelless.vertical import (
    AppLoad,
    Hold,
    VerticalDecision,
    decide,
    retarget,
)
from infless.scaling.config import DemandConfig
from infless.scaling.demand import Demand
from infless.scaling.view import FunctionView, InstanceState, PoolView


@dataclass(slots=True)
class _Pass:
    """One planning pass: what it reads, and what it decides so far (local to the pass)."""

    functions: dict[str, FunctionView]
    counted: Demand  # the applications' and pinned queries' arrival rates
    rates: dict[str, float]  # the demand Algorithm 1 plans with (built up)
    free: int | None  # free cores on the servers
    now_s: float
    cfg: ModellessConfig
    holds: dict[str, Hold]
    pending: dict[str, tuple[str, float]]
    cold: set[str] = field(default_factory=set)  # variants no longer wanted warm
    frozen: dict[str, int] = field(default_factory=dict)  # serving on, at most this many
    standby: set[str] = field(default_factory=set)  # overflow variants kept warm beside


def plan_vertical(
    snapshot: Sequence[ModelReading],
    view: PoolView,
    demand: Demand,
    *,
    memory: PlannerMemory,
    cfg: ModellessConfig,
    demand_cfg: DemandConfig,
) -> VerticalPlan:
    """One pass of model-vertical scaling (see the module docstring). `view.now_s` is the
    clock reading; `memory` is the previous pass's `VerticalPlan.memory`."""
    now = view.now_s
    # the first pass reads the counters only: an interval before it would be a guess (the
    # simulator's t = 0 prewarm pass read an empty one, and the applications' estimates
    # then saw a step from zero that their functions' did not)
    since = None if memory.last_s is None else memory.last_s
    functions = {f.name: f for f in view.functions}
    readings = [
        r for r in snapshot if any(c.function in functions for c in r.entry.catalogue.cards)
    ]
    counted, counts, seen = count_arrivals(
        readings, memory.counts, memory.seen, since, now, demand_cfg
    )
    tick = _Pass(
        functions=functions,
        counted=counted,
        rates=dict(demand.rates_rps),
        free=sum(s.free_cpus for s in view.servers) if view.servers else None,
        now_s=now,
        cfg=cfg,
        holds=dict(memory.holds),
        pending=dict(memory.pending),
    )
    apps = tuple(_plan(reading, tick) for reading in readings)
    letting_go = _letting_go(view.functions, tick.cold, tick.rates)
    next_memory = PlannerMemory(
        counts=counts,
        seen=seen,
        holds=tick.holds,
        pending=tick.pending,
        last_s=now,
        handed=letting_go,
    )
    return VerticalPlan(
        apps=apps,
        rates_rps=tick.rates,
        cold=frozenset(tick.cold),
        frozen=tick.frozen,
        standby=frozenset(tick.standby),
        memory=next_memory,
        freed=letting_go - memory.handed,
    )


def _letting_go(
    functions: Sequence[FunctionView], cold: set[str], rates: Mapping[str, float]
) -> frozenset[str]:
    """The instances (not draining) of the variants let go with no demand left: Algorithm 1
    stops them in this pass."""
    return frozenset(
        instance.instance_id
        for function in functions
        if function.name in cold and rates.get(function.name, 0.0) <= 0.0
        for instance in function.instances
        if instance.state is not InstanceState.DRAINING
    )


def adjusted(view: PoolView, plan: VerticalPlan) -> tuple[PoolView, Demand]:
    """The view and demand Algorithm 1 should plan with after `plan`. The cores of a
    retired variant left without demand count as free (`plan.freed`, once per instance):
    Algorithm 1 stops its instances in this pass and may start the target's on their cores
    at once (the instance stopping finishes its last queries on a core it then shares, as
    the allocator allows), not a tick later."""
    out = []
    freed: dict[str, int] = {}
    for function in view.functions:
        for instance in function.instances:
            if instance.instance_id in plan.freed:
                cores = freed.get(instance.server_id, 0) + instance.config.cpus
                freed[instance.server_id] = cores
        if function.name in plan.cold:
            # not kept warm, and its releases are not held back (stability.hold)
            function = replace(  # noqa: PLW2901
                function, keep_warm=False, min_instances=0, retired=True
            )
        elif function.name in plan.frozen:
            cap = min(function.max_instances, max(1, plan.frozen[function.name]))
            function = replace(function, max_instances=cap)  # noqa: PLW2901
        if function.name in plan.standby:
            function = replace(function, standby=True)  # noqa: PLW2901
        out.append(function)
    servers = tuple(
        replace(s, free_cpus=min(s.cpus, s.free_cpus + freed.get(s.server_id, 0)))
        for s in view.servers
    )
    return replace(view, servers=servers, functions=tuple(out)), Demand(dict(plan.rates_rps))


def _plan(reading: ModelReading, tick: _Pass) -> AppDecision:
    """One model: its decision, its variants' demand in `tick.rates`, and which of them
    go `cold` or stay `frozen` at a size (see the module docstring)."""
    entry = reading.entry
    functions, rates, free = tick.functions, tick.rates, tick.free
    present = [c for c in entry.catalogue.cards if c.function in functions]
    # Algorithm 1 plans for the estimate's planning rate (ahead of a rise); the variant is
    # chosen for the measured rate, so that a step's overshoot does not switch it
    app_rps = tick.counted.rate_rps(app_key(entry.model))
    seen_rps = tick.counted.measured_rate_rps(app_key(entry.model))
    if reading.traffic.arrivals == 0:
        # no query yet: a demand handed in from outside (the simulator's t = 0 prewarm)
        # is on the variants' own rates
        app_rps = seen_rps = max(rates.get(c.function, 0.0) for c in present)
    pinned = {c.name: tick.counted.rate_rps(pinned_key(c.function)) for c in present}
    pinned_seen = {c.name: tick.counted.measured_rate_rps(pinned_key(c.function)) for c in present}
    live = {c.name: _live(functions[c.function]) for c in present}
    live_qps = {c.name: _qps(c, functions[c.function], entry.capacity, ready=True) for c in present}
    overflow = _overflow(entry, present, tick.cfg)
    load = AppLoad(
        model=entry.model,
        goals=entry.planning_goals,
        cards=entry.catalogue.cards,
        live=live,
        live_qps=live_qps,
        load_rps=max(0.0, seen_rps - sum(pinned_seen.values())),
        ahead_rps=max(0.0, app_rps - sum(pinned.values())),
        free_cpus=free,
        capacity=entry.capacity,
        overflow=overflow,
    )
    decision = _decide(entry, load, tick)

    def decided(released: frozenset[str] | None) -> AppDecision:
        return AppDecision(
            model=entry.model,
            decision=decision,
            target=decision.target,
            overflow=overflow,
            released=released,
            switched=decision.move in ("upgrade", "downgrade"),
            load_rps=load.load_rps,
        )

    if decision.target is None:
        return decided(None)
    # the overflow variant kept beside the target (none when the target is that variant)
    keep = None if overflow == decision.target else overflow
    kept = entry.card(keep) if keep is not None else None
    if kept is not None:  # its warm instance is there for a step the target cannot take
        tick.standby.add(kept.function)
    # the target serves (Active, or busy: then more of it needs the others' cores), and its
    # ready instances carry the load: until then the others bridge (the queries it has no
    # room for spill over to them)
    serving = entry.states.get(decision.target, VariantState.INACTIVE) is not VariantState.INACTIVE
    target = entry.card(decision.target)
    short = _cores_short(entry, decision, live, free)
    bridging = [c for c in present if c.name not in (decision.target, keep) and live[c.name]]
    carried = target is not None and (
        load.load_rps <= _qps(target, functions[target.function], entry.capacity, True)
        # no core free for its next instance, and the bridge's cores serve more as its own
        or (short > 0 and outserves(target, bridging, entry.capacity))
    )
    target_serving = serving and carried
    own = {c.name: rates.get(c.function, 0.0) for c in present}
    moved = retarget(
        app_rps, own, pinned, decision.target, target_serving, [c.name for c in present]
    )
    for card in present:
        rates[card.function] = moved[card.name]
    if target_serving:
        let_go = [c for c in present if c.name not in (decision.target, keep)]
        tick.cold.update(c.function for c in let_go)
        if keep is not None:  # warm, with what spills over to it
            card = next(c for c in present if c.name == keep)
            rates[card.function] = max(moved[keep], own[keep])
        return decided(frozenset(c.name for c in let_go))
    released = _make_room(
        entry=entry,
        present=present,
        target=decision.target,
        keep=keep,
        live=live,
        pinned=pinned,
        short=short,
        tick=tick,
        bridge=not serving,
    )
    return decided(released)


def _cores_short(
    entry: ModelEntry, decision: VerticalDecision, live: Mapping[str, int], free: int | None
) -> int:
    """The cores the target's new instances need beyond what is free."""
    target = decision.target
    card = entry.card(target) if target is not None else None
    if card is None or free is None:
        return 0
    wanted = next((o.instances for o in decision.options if o.card.name == target), 1)
    missing = max(0, wanted - live.get(card.name, 0)) * card.cpus
    return max(0, missing - free)


def _make_room(
    *,
    entry: ModelEntry,
    present: list[VariantCard],
    target: str,
    keep: str | None,
    live: Mapping[str, int],
    pinned: Mapping[str, float],
    short: int,
    tick: _Pass,
    bridge: bool,
) -> frozenset[str]:
    """Until the target carries the load, the variants it replaces give up the cores its
    new instances need beyond what is free (`short`). The weakest go first and wholly; the
    overflow variant goes down to one instance, and so does the one carrying the most
    while the target serves nothing yet (with `bridge`: the queries must go somewhere).
    Returns the variants released (gone cold)."""
    others = [c for c in present if c.name != target]
    others.sort(key=lambda c: live[c.name] * qps_here(c, entry.capacity))
    for index, card in enumerate(others):
        floor = 1 if (bridge and index == len(others) - 1) or card.name == keep else 0
        give = max(0, min(live[card.name] - floor, -(-short // card.cpus)))
        short -= give * card.cpus
        if live[card.name] - give <= 0:
            tick.cold.add(card.function)
            tick.rates[card.function] = pinned.get(card.name, 0.0)
        else:
            tick.frozen[card.function] = live[card.name] - give
    return frozenset(c.name for c in others if c.function in tick.cold)


def _overflow(entry: ModelEntry, present: list[VariantCard], cfg: ModellessConfig) -> str | None:
    """The variant kept warm beside the target (`overflow.overflow_card`), if the
    `[modelless] overflow` setting asks for one."""
    if not cfg.overflow:
        return None
    card = overflow_card(present, entry.planning_goals, entry.capacity, entry.overflow)
    return card.name if card is not None else None


def _settled(entry: ModelEntry, current: str | None, tick: _Pass) -> bool:
    """Whether the model's last move has landed: its new variant serves (the monitor saw
    it), or it has had `settle_s` to do so (a start that fails must not pin the model)."""
    pending = tick.pending.get(entry.model)
    if pending is None or pending[0] != current:
        return True
    serving = entry.states.get(pending[0], VariantState.INACTIVE) is not VariantState.INACTIVE
    if serving or tick.now_s - pending[1] > tick.cfg.settle_s:
        del tick.pending[entry.model]
        return True
    return False


def _decide(entry: ModelEntry, load: AppLoad, tick: _Pass) -> VerticalDecision:
    """`vertical.decide` for one model, with its hold and its pending move kept in
    `tick`."""
    current = entry.target
    if current is None:  # nothing chosen yet: the variant running the most, if any
        running = [name for name, n in load.live.items() if n > 0]
        current = max(running, key=lambda n: load.live[n]) if running else None
    hold = tick.holds.get(entry.model, Hold())
    settled = _settled(entry, current, tick)
    decision = decide(load, current, hold, tick.cfg, settled)
    tick.holds[entry.model] = decision.hold
    if decision.target is not None and decision.target != current:
        tick.pending[entry.model] = (decision.target, tick.now_s)
    return decision


def _live(function: FunctionView) -> int:
    return sum(1 for i in function.instances if i.state is not InstanceState.DRAINING)


def _qps(
    card: VariantCard, function: FunctionView, capacity: Capacity, ready: bool = False
) -> float:
    """What the function's live (not draining) instances sustain — only the ready ones with
    `ready` — each at its own <b, c>, at the speed the variant runs here
    (`capacity.instance_qps_here`)."""
    counted = (InstanceState.READY,) if ready else (InstanceState.READY, InstanceState.STARTING)
    return sum(
        instance_qps_here(card, i.config.batch_size, i.config.cpus, capacity)
        for i in function.instances
        if i.state in counted
    )

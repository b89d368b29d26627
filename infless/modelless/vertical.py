"""Model-vertical scaling (INFaaS §4.2): for each application, replicate the running
variant or switch to another. This is the paper's greedy heuristic for its ILP.

The ILP's cost. An action δ on variant v costs C_v·(δ + λ·T_load,v·max(δ, 0)): hardware
cost per second, plus the load latency of the instances it adds, weighed by λ. The
instances must carry the load plus slack, new instances must meet the SLO, and all must
fit the resources.

The heuristic. At each tick it compares "replicate the current variant" with "move to
variant v", for every v that meets the application's goals. Option v needs
n_v = ceil(L·(1 + slack) / Q_v) instances and costs C_v·n_v + λ·C_v·T_load,v·max(n_v − N_v, 0),
where N_v is its live instances. Q_v is what the variant sustains at its capacity factor
(`modelless.capacity`, `cards.sustained_qps`): its profiled latencies slowed down and
judged at the tail the instances measured for their batches, as the data plane judges
them, which may force a smaller batch. Options that do not fit the cores are dropped; if none
fits, the one serving the most per core at the host's speed stays
(`capacity.per_core_here`: one factor for all, so that a variant measured low while it
refuses under an overload does not lose its place to a slower one, which the load would
leave again). A current variant that
is no longer an option moves at once, to the best option for the rate ahead of the rise
(`AppLoad.ahead_rps`): mid-step the measured load is only the part of the step seen so
far, and a variant that fits that part would be left again at the next tick. Ties go to
the more accurate variant. With nothing chosen yet, an application starts on the option
that is best once loaded (C·n, then accuracy, then the load term).

The load is the application's measured rate (`scaling.demand`), not the rate Algorithm 1
provisions for ahead of a rise: that one reads a step as a steep ramp, several times the
rate that came, and a variant chosen for it would be switched away from on every step.

Upgrades. When the current variant's ready instances do not carry the load plus slack
(counted at their own sizes, which Algorithm 1 chose: `AppLoad.live_qps`; the instances
still starting do not count — Algorithm 1 starts them for the rate ahead, and counting
them would have the current variant replicated before the switch is weighed), the load
forces a move. Another option that serves more requests per core at the host's speed
(`capacity.per_core_here`: its profile at the host factor, one factor for all variants),
and costs less (load term included), wins at once: an *upgrade*. If none costs less, the
current variant is replicated.

Downgrades. Without load pressure an option is judged by what it costs once loaded (C·n),
then by accuracy; with the load term in, an application would stay on whatever it runs.
A move to a better option (fewer cores, or as many and more accurate: back to fp32 when
the load has fallen) waits until the same choice was made on `scale_down_ticks`
consecutive ticks, like the reference's scale-down. It is judged at the load plus
`downgrade_headroom` of it, so that a variant that only just carries the load is not
upgraded from again at the next burst, and on a host `STEADY_SPEED_MARGIN` slower than
measured (`Capacity.slowed`), so that a variant whose batches only just fit the SLO at
this second's reading is not left again at the next one. Only variants that still meet
the SLO at their capacity factor count (`capacity.meets_slo_here`: on a busy host, fp32's
batch-1 time can pass the SLO however light the load).

The tail. A variant is chosen for its accuracy (at the start, by a downgrade, or kept)
only while its predicted p99 here leaves headroom under the SLO (`tail_fits`): its
batch-1 time at its capacity factor, stretched by the tail this host adds, measured
(`Capacity.tail_ratio`), within `tail_share` of the SLO. A mean within the SLO is not
enough: an accurate variant near the SLO answers a share of its queries late. A current
variant that no longer fits moves at once to the best quicker option that does (an
upgrade). With nothing measured yet, the profile is all there is and every variant fits;
but an application whose best option serves one query at a time (no batch wait to absorb
the tail) starts on the overflow variant, where a fixed deployment would, and moves to
accuracy by a downgrade once the tail is measured.

How many instances, with which <b, c>, stays Algorithm 1's business. This module decides
which variant carries the application's load, and `retarget` moves the demand there
(`modelless.planner` runs both in the autoscaler's planning pass).

The overflow variant (`modelless.overflow`, with `[modelless] overflow`) is the one a fixed
deployment would pick: the cheapest per request that meets the goals, at the speed
measured here. It stays warm beside the target, and a query the target cannot admit in
time goes there (`catalog.choose`). Its cores are not the other options' to take
(`AppLoad.overflow`).
Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from infless.modelless.capacity import Capacity, meets_slo_here, per_core_here, qps_here
from infless.modelless.cards import VariantCard, instances_needed
from infless.modelless.config import ModellessConfig
from infless.modelless.profiles import Goals
from infless.modelless.selection import meets

Move = Literal["start", "keep", "replicate", "upgrade", "downgrade"]
# a downgrade's variant must carry the load on a host this much slower than measured: live,
# the host factor read 0.94 and 0.83 1.5 s apart, and a variant whose batch 4 fitted the
# SLO at the first reading was moved to and left again at the second (R12, session 17)
STEADY_SPEED_MARGIN = 1.2
# why a switch was made (`VerticalDecision.reason`); "" for the moves that switch nothing
Why = Literal["", "tail", "load", "unfit", "steady"]


@dataclass(frozen=True, slots=True)
class AppLoad:
    """One application at one tick, as vertical scaling sees it."""

    model: str
    goals: Goals  # the application's goals (its latency bound defaults to the SLO)
    cards: tuple[VariantCard, ...]
    live: Mapping[str, int]  # variant -> instances starting or serving
    load_rps: float  # the demand that may go to any variant meeting the goals (measured)
    free_cpus: int | None = None  # cores free on the servers (None: unbounded)
    capacity: Capacity = field(default_factory=Capacity)  # measured / profiled Q
    overflow: str | None = None  # the variant kept warm whatever is chosen (its one instance)
    # variant -> what its live instances sustain at their own <b, c> (None: not known; the
    # load is then weighed in instances of the card's configuration)
    live_qps: Mapping[str, float] | None = None
    # the demand planned for ahead of a rise (`scaling.demand`'s planning rate): where a
    # variant that no longer fits goes (None: the measured load)
    ahead_rps: float | None = None


@dataclass(frozen=True, slots=True)
class Option:
    card: VariantCard
    instances: int
    cost: float  # C·n + λ·C·T_load·max(n − N, 0), in core-units
    qps: float  # what one instance sustains here (the card's Q at its capacity factor)


@dataclass(frozen=True, slots=True)
class Hold:
    """A move waiting for its delay: the variant wanted and for how many ticks in a row."""

    wanted: str | None = None
    ticks: int = 0


@dataclass(frozen=True, slots=True)
class VerticalDecision:
    model: str
    target: str | None  # the variant that carries the load from now on (None: no variant)
    previous: str | None
    move: Move
    options: tuple[Option, ...] = ()
    hold: Hold = Hold()
    # why a switch was made: "tail" (the current variant's p99 here is past `tail_share` of
    # the SLO), "load" (its instances do not carry the load), "unfit" (it is no longer an
    # option: its instances for this load do not fit the cores, or it misses the goals),
    # "steady" (a better option without load pressure); "" for the other moves
    reason: Why = ""


def option(card: VariantCard, load: AppLoad, cfg: ModellessConfig) -> Option:
    """`card` carrying the load: n instances at its measured share of the profiled Q, and
    the ILP's cost of running them."""
    qps = qps_here(card, load.capacity)
    n = instances_needed(qps, load.load_rps, cfg.slack)
    added = max(0, n - load.live.get(card.name, 0))
    cost = card.cpus * n + cfg.load_weight_per_s * card.cpus * (card.load_ms / 1000.0) * added
    return Option(card, n, cost, qps)


def _fits(opt: Option, load: AppLoad, cards: Mapping[str, VariantCard]) -> bool:
    if load.free_cpus is None:
        return True
    held = sum(cards[name].cpus * count for name, count in load.live.items() if name in cards)
    reserved = 0  # the overflow's one instance stays, whichever option is taken
    if load.overflow is not None and load.overflow != opt.card.name and load.overflow in cards:
        reserved = cards[load.overflow].cpus
    return opt.instances * opt.card.cpus <= load.free_cpus + held - reserved


def options(load: AppLoad, cfg: ModellessConfig) -> tuple[Option, ...]:
    """Every variant meeting the goals, as an option, cheapest first (ties: most accurate)."""
    by_name = {c.name: c for c in load.cards}
    candidates = [option(c, load, cfg) for c in load.cards if meets(c, load.goals)]
    fitting = [o for o in candidates if _fits(o, load, by_name)]
    if not fitting and candidates:  # nothing fits: the most per core at the host's speed
        fitting = [max(candidates, key=lambda o: per_core_here(o.card, load.capacity))]
    return tuple(sorted(fitting, key=_rank))


def decide(  # noqa: PLR0911 - one return per move, in the order they are decided
    load: AppLoad,
    current: str | None,
    hold: Hold,
    cfg: ModellessConfig,
    settled: bool = True,
) -> VerticalDecision:
    """Which variant carries `load` now: see the module docstring. Not `settled` (the
    current variant was chosen but does not serve yet), it is replicated if need be, not
    replaced: a second switch before the first one lands throws a start away."""
    ranked = options(load, cfg)

    def decided(
        target: str | None, move: Move, wait: Hold = Hold(), reason: Why = ""
    ) -> VerticalDecision:
        return VerticalDecision(
            model=load.model,
            target=target,
            previous=current,
            move=move,
            options=ranked,
            hold=wait,
            reason=reason,
        )

    if not ranked:
        return decided(None, "keep")
    now = next((o for o in ranked if o.card.name == current), None)
    if current is None or now is None:  # nothing chosen yet, or the current one is out
        best = _first_or_out(ranked, load, current is None, cfg)
        if current is None:
            return decided(best.card.name, "start")
        if best.card.name == current:  # the rate ahead leaves it the best there is
            return decided(current, "replicate")
        return decided(best.card.name, "upgrade", reason="unfit")
    pressed = _pressed(now, load, cfg)
    if not settled:
        return decided(current, "replicate" if pressed else "keep")
    if not tail_fits(now.card, load.capacity, cfg):
        # answering late at its tail here: the best quicker option that fits, at once
        now_ms = _b1_here(now.card, load.capacity)
        quicker = [o for o in ranked if _b1_here(o.card, load.capacity) < now_ms]
        escape = _best_fitting(quicker, load.capacity, cfg)
        if escape is not None:
            return decided(escape.card.name, "upgrade", reason="tail")
    if pressed:  # the load needs more than the current variant runs
        # only towards variants that serve more per core at the host's speed: one factor
        # for all, so a variant's own measurement does not reverse the order (a variant
        # refusing on a busy host measures low, and would send the load to a slower one)
        faster = per_core_here(now.card, load.capacity)
        others = [
            o
            for o in ranked
            if o.card.name != current and per_core_here(o.card, load.capacity) > faster
        ]
        best = min(others, key=_rank, default=now)
        if round(best.cost, 9) >= round(now.cost, 9):  # a switch must cost less: else replicate
            best = now
        move: Move = "replicate" if best is now else "upgrade"
        return decided(best.card.name, move, reason="load" if move == "upgrade" else "")
    # a move without load pressure needs a variant that carries the load with headroom
    # (else it is upgraded from again at the next burst) at less than the current one costs
    # and meets the SLO at the speed this host runs it (an accurate variant slowed past the
    # SLO would answer every query late; its profile on an idle core says nothing of that)
    roomy = options(
        replace(
            load,
            load_rps=load.load_rps * (1.0 + cfg.downgrade_headroom),
            capacity=load.capacity.slowed(STEADY_SPEED_MARGIN),
        ),
        cfg,
    )
    here = [
        o
        for o in roomy
        if meets_slo_here(o.card, load.capacity) and tail_fits(o.card, load.capacity, cfg)
    ]
    steady = min(here, key=_steady_rank, default=now)
    if steady.card.name == current or _steady_rank(steady) >= _steady_rank(now):
        return decided(current, "keep")
    ticks = hold.ticks + 1 if hold.wanted == steady.card.name else 1
    if ticks >= cfg.scale_down_ticks:
        return decided(steady.card.name, "downgrade", reason="steady")
    return decided(current, "keep", Hold(steady.card.name, ticks))


def _first_or_out(
    ranked: Sequence[Option], load: AppLoad, first: bool, cfg: ModellessConfig
) -> Option:
    """Where an application goes with nothing chosen yet (`first`), or from a current
    variant that is no longer an option: the best option whose tail fits (else the
    quickest). A first choice that serves one query at a time on a host whose tail is not
    measured yet is the overflow variant instead, where a fixed deployment would start. A
    current variant out of the options cannot carry the measured load: the move goes
    where the rise is heading, not to a variant that fits only the part of a step seen so
    far."""
    fitting = _best_fitting(ranked, load.capacity, cfg)
    best = _quickest(ranked) if fitting is None else fitting
    if first:
        fixed = next((o for o in ranked if o.card.name == load.overflow), None)
        if fixed is not None and _unproven(best.card, load.capacity):
            return fixed
        return best
    if load.ahead_rps is not None and load.ahead_rps > load.load_rps:
        ahead = options(replace(load, load_rps=load.ahead_rps), cfg)
        best = _best_fitting(ahead, load.capacity, cfg) or best
    return best


def _pressed(now: Option, load: AppLoad, cfg: ModellessConfig) -> bool:
    """Whether the load needs more than the current variant runs: more, with the slack,
    than its live instances sustain at their own sizes (Algorithm 1 sizes them, not always
    at the card's configuration); where that is not known, more of the card's instances
    than it runs."""
    name = now.card.name
    if load.live_qps is None or name not in load.live_qps:
        return now.instances > load.live.get(name, 0)
    return load.load_rps * (1.0 + cfg.slack) > load.live_qps[name]


def tail_fits(card: VariantCard, capacity: Capacity, cfg: ModellessConfig) -> bool:
    """Whether the card's predicted p99 here — its batch-1 time on its cores at its
    capacity factor, stretched by the host's tail (`Capacity.tail_ratio`) — is within
    `tail_share` of the SLO. Unmeasured (no stretch yet, or a card without an SLO): yes,
    as profiled."""
    if capacity.tail_ratio is None or card.slo_ms <= 0:
        return True
    return _b1_here(card, capacity) * capacity.tail_ratio <= cfg.tail_share * card.slo_ms


def _best_fitting(
    options: Sequence[Option], capacity: Capacity, cfg: ModellessConfig
) -> Option | None:
    """The best of `options` whose tail fits (`tail_fits`), steady rank then cost; None
    when none fits."""
    fitting = [o for o in options if tail_fits(o.card, capacity, cfg)]
    return min(fitting, key=lambda o: (*_steady_rank(o), o.cost), default=None)


def _b1_ms(card: VariantCard) -> float:
    """The card's batch-1 time on its own core count (its best one without points)."""
    return next((t for b, c, t in card.points if b == 1 and c == card.cpus), card.latency_b1_ms)


def _unproven(card: VariantCard, capacity: Capacity) -> bool:
    """Whether `card` serves one query at a time (no batch wait to absorb the host's
    tail) on a host whose tail is not measured yet: its headroom is not known."""
    return capacity.tail_ratio is None and card.batch_size == 1


def _b1_here(card: VariantCard, capacity: Capacity) -> float:
    """The card's batch-1 time on its cores at its capacity factor here."""
    return _b1_ms(card) / max(capacity.factor(card.name), 1e-3)


def _quickest(ranked: Sequence[Option]) -> Option:
    """The option with the least batch-1 time by its profile (none fits the tail)."""
    return min(ranked, key=lambda o: (o.card.latency_b1_ms, _rank(o)))


def _rank(o: Option) -> tuple[float, float]:
    """The ILP's cost (with the load term), then accuracy."""
    return (round(o.cost, 9), -o.card.accuracy)


def _steady_rank(o: Option) -> tuple[float, float]:
    """What the option costs once loaded (C·n), then accuracy: what a move without load
    pressure is judged by (the load term would pin every application to what it runs)."""
    return (o.card.cpus * o.instances, -o.card.accuracy)


def retarget(
    app_rps: float,
    rates: Mapping[str, float],
    pinned: Mapping[str, float],
    target: str,
    target_serving: bool,
    variants: Sequence[str],
) -> dict[str, float]:
    """The demand of each variant function of one application after the decision.

    `app_rps`: the application's arrival rate (one estimate for the application: the sum
    of its variants' separate estimates would count traffic that moved between them
    twice); `rates` by variant: their own estimates; `pinned`: what queries the target
    cannot serve (their goals exclude it, or they named a variant) bring to each. The rest
    goes to the target — and, once the target serves, the others keep only their pinned
    demand; until then they keep their own, so the old variant serves while the new one
    starts.
    """
    stuck = {v: pinned.get(v, 0.0) for v in variants}
    movable = max(0.0, app_rps - sum(stuck.values()))
    result: dict[str, float] = {}
    for variant in variants:
        if variant == target:
            result[variant] = movable + stuck[variant]
        elif target_serving:
            result[variant] = stuck[variant]
        else:
            result[variant] = rates.get(variant, 0.0)
    return result

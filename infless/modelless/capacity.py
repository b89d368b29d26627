"""What share of its profiled throughput each variant delivers here and now.

Profiles time the forward pass on an idle core (thread CPU clock). A worker serving
beside the gateway, the client and other workers runs slower: on a 2-core machine about
half as fast. It also pays for decoding and encoding its batches.

The monitor measures that share in every window where a variant served at least
`capacity_min_batches` batches, once its instances are past their warm-in
(`WindowLoad.warming`: a fresh worker's first batches pay one-time costs). The tail
stretch below does count those windows: a tail taken on a fresh worker errs on the safe
side, while an unmeasured one lets a slower variant in as profiled (at a 20-ms SLO, with
the warm-in skipped there too, the application moved to fp32 five seconds in, before the
host's tail had been measured, and had 952 violations in a round against fixed bf16's 82).
The share is the profile's t_exec at the mean batch
served, over the worker's measured service time per batch (wall clock, as it serves).
In a window where the variant refused `SATURATED` of its arrivals or more (at capacity,
not a burst's few refusals) with a steady number of replicas, a second figure counts: the
share of the window its replicas would have been busy serving what they served at
profiled speed. When that is lower it is used, since it also counts the gaps between
batches (the gateway's side).

The ratio is averaged into the variant's *own* factor. Weighted by batches, it is also
averaged into the application's *host* factor: the contention a variant that does not
run now would meet. So vertical scaling compares a running variant's measured capacity
with the other variants' profiles corrected by the same contention, not with their
idle-core promises. A variant with no such window drifts towards the host factor by
`capacity_recovery` of the gap per window.

The host also stretches the tail. Queries served one at a time wait behind each other,
and that wait grows with the forward time; the gateway, the client and other work add
their share. The stretch, `tail_ratio`, is measured in every window where a variant
served one query at a time and answered enough of them to have a p99: that p99 over its
profiled t_exec at its factor (at least 1). Instances that batch wait for their batches
to fill on purpose (Algorithm 1 plans that wait within the SLO), so their p99 says
nothing of the host: their windows do not count. Averaged over the variants by answers,
the stretch is averaged into the running figure like the host factor; a window with
nothing to measure brings it `capacity_recovery` of the way back to 1 (an old burst's
tail must not bar a variant for good). A variant's predicted p99 here is its batch-1
time at its factor times the stretch (`vertical.tail_fits`): how vertical scaling judges
whether a slower, more accurate variant leaves headroom under the SLO.

A batch's tail stretches past its mean too. The data plane serves a batch size only
where its service time at its tail (the mean times the instance's measured tail ratio,
`ExecModel.tail_ratio`) fits the SLO — half of it for a batch — so a variant whose batches
fit only by their mean is served in small batches, at a fraction of the rate its profile
promises. `batch_tail` is that ratio, averaged over the application's instances by the
batches they served (`WindowLoad.tail_ratio`) and into a running figure; a window that
measured none leaves it as it was. Every rate a card is credited with here is judged at
it (`cards.sustained_qps`). A variant that runs is judged, at the batch sizes its
instances measured, by their mean service times (`service`: the data plane's own table,
`WindowLoad.service_ms_by_batch`) rather than its profile at one factor: under
contention fp32's batch 8 of lstm-2365 slowed to 44–58 ms while its batch 1 kept about
its profile, and the factor, measured at the small batches served, did not move.
`qps_here`, `instance_qps_here` and `meets_slo_here` are where a card is judged at this
host's speed.

Two judgements are made at the host factor alone, one factor for every variant: what a
variant serves per core here (`per_core_here`: its profile's order, less the batches the
SLO no longer allows at that speed and tail), by which vertical scaling orders the
variants under load, and whether a switch's target serves enough more per core than the
variants bridging for it to take their cores (`outserves`). A variant's own factor would
let one measured low while it refuses under an overload lose its place to a slower one.
Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from infless.modelless.cards import VariantCard, instance_qps, meets_slo_at, sustained_qps
from infless.modelless.config import ModellessConfig
from infless.modelless.states import WindowLoad

LOWEST, HIGHEST = 0.05, 2.0  # a factor is kept within these bounds
WEIGHT = 0.5  # of a new observation in the running averages
SATURATED = 0.2  # share of a window's arrivals refused: the variant is at capacity
# with no core free, a switch's target takes the cores of the variants bridging for it once
# it serves this much more per core than each of them (`outserves`)
HANDOVER_MARGIN = 1.25


@dataclass(frozen=True, slots=True)
class ServiceTimes:
    """A running variant's mean service time per batch size, as its instances measured it
    (`WindowLoad.service_ms_by_batch`), on `cpus` cores each."""

    cpus: int
    ms_by_batch: Mapping[int, float]


@dataclass(frozen=True, slots=True)
class Capacity:
    """What an application's variants measured of this host: capacity factors (measured
    over profiled throughput), the tail stretch, the batches' tail and the running
    variants' service times."""

    host: float = 1.0  # for a variant never measured
    own: Mapping[str, float] = field(default_factory=dict)  # by variant, from its windows
    tail_ratio: float | None = None  # the p99 over the forward time here (None: unmeasured)
    # a batch's service time at its tail over its mean, as the data plane measures it on
    # the instances (None: unmeasured)
    batch_tail: float | None = None
    # by running variant: the service times its instances measured per batch size
    service: Mapping[str, ServiceTimes] = field(default_factory=dict)

    def factor(self, variant: str) -> float:
        return self.own.get(variant, self.host)

    def slowed(self, by: float) -> Capacity:
        """The same figures on a host `by` times slower: every factor divided by it, every
        measured service time multiplied (the tails as they are)."""
        return replace(
            self,
            host=self.host / by,
            own={v: f / by for v, f in self.own.items()},
            service={
                v: ServiceTimes(t.cpus, {b: ms * by for b, ms in t.ms_by_batch.items()})
                for v, t in self.service.items()
            },
        )

    def measured(self, card: VariantCard) -> Mapping[int, float] | None:
        """The service times the card's instances measured per batch size, where they run
        at its core count (None: not running, or not measured yet)."""
        times = self.service.get(card.name)
        return times.ms_by_batch if times is not None and times.cpus == card.cpus else None

    @property
    def batch_stretch(self) -> float:
        """`batch_tail`, 1 where unmeasured (the profile's median as it is)."""
        return 1.0 if self.batch_tail is None else self.batch_tail


def observed(load: WindowLoad, min_batches: int) -> float | None:
    """Profiled over measured service time per batch in one window; None with too few
    batches to say."""
    if load.warming or load.batches < max(1, min_batches):
        return None
    if load.service_ms <= 0 or load.profiled_ms <= 0:
        return None
    ratio = load.profiled_ms * load.batches / load.service_ms
    return min(HIGHEST, max(LOWEST, ratio))


def delivered(load: WindowLoad) -> float | None:
    """In a window where the variant refused `SATURATED` of its arrivals or more with as
    many replicas throughout (not one that started or stopped one): the share of the
    window its replicas would have been busy serving what they served at profiled speed —
    at capacity they are busy all along, so that share is what they sustain against their
    profile, gaps between batches included. None otherwise."""
    if load.warming or not load.stable or load.replicas <= 0 or load.window_s <= 0:
        return None
    if load.refused <= 0 or load.refused < SATURATED * (load.refused + load.completed):
        return None
    busy_s = load.batches * load.profiled_ms / 1000.0
    return max(LOWEST, min(HIGHEST, busy_s / (load.replicas * load.window_s)))


def next_capacity(
    prev: Capacity, windows: Mapping[str, WindowLoad], cfg: ModellessConfig
) -> Capacity:
    """The factors after one monitoring window of each variant (see the module docstring)."""
    seen: dict[str, float] = {}
    for variant, load in windows.items():
        ratio = observed(load, cfg.capacity_min_batches)
        if ratio is not None:
            seen[variant] = ratio
        served = delivered(load)
        if served is not None:
            seen[variant] = min(served, seen.get(variant, HIGHEST))
    host = prev.host
    batches = sum(windows[v].batches for v in seen)
    if batches > 0:
        mean = sum(ratio * windows[v].batches for v, ratio in seen.items()) / batches
        host = (1.0 - WEIGHT) * host + WEIGHT * mean
    own: dict[str, float] = {}
    for variant in {*prev.own, *seen}:
        before = prev.own.get(variant, prev.host)
        if variant in seen:
            own[variant] = (1.0 - WEIGHT) * before + WEIGHT * seen[variant]
        else:
            own[variant] = before + (host - before) * cfg.capacity_recovery
    return Capacity(
        host=host,
        own=own,
        tail_ratio=next_tail(prev.tail_ratio, windows, own, host, cfg),
        batch_tail=next_batch_tail(prev.batch_tail, windows),
        service=next_service(prev.service, windows),
    )


def next_service(
    prev: Mapping[str, ServiceTimes], windows: Mapping[str, WindowLoad]
) -> dict[str, ServiceTimes]:
    """Each variant's measured service times after one window: the instances' table where
    they measured one past their warm-in; kept while its instances have not re-measured;
    gone with its last ready instance (a variant not running is judged by its profile at
    the factors)."""
    service = dict(prev)
    for variant, load in windows.items():
        if load.replicas <= 0:
            service.pop(variant, None)
        elif load.service_ms_by_batch and not load.warming:
            service[variant] = ServiceTimes(load.cpus, dict(load.service_ms_by_batch))
    return service


def qps_here(card: VariantCard, capacity: Capacity, factor: float | None = None) -> float:
    """What one instance of the card sustains here (`cards.sustained_qps`): its profile at
    its own capacity factor (or `factor`), its batches judged at their measured tail, and
    the batch sizes its instances measured at what they measured."""
    f = capacity.factor(card.name) if factor is None else factor
    return sustained_qps(card, f, capacity.batch_stretch, capacity.measured(card))


def instance_qps_here(card: VariantCard, batch_size: int, cpus: int, capacity: Capacity) -> float:
    """What one instance of the card at <batch_size, cpus> sustains here
    (`cards.instance_qps`, in `qps_here`'s terms; its instances' measured times count only
    at the card's core count)."""
    measured = capacity.measured(card) if cpus == card.cpus else None
    factor, tail = capacity.factor(card.name), capacity.batch_stretch
    return instance_qps(card, batch_size, cpus, factor, tail, measured)


def meets_slo_here(card: VariantCard, capacity: Capacity) -> bool:
    """Whether some batch size of the card still fits the SLO here (`cards.meets_slo_at`,
    in `qps_here`'s terms)."""
    factor, tail = capacity.factor(card.name), capacity.batch_stretch
    return meets_slo_at(card, factor, tail, capacity.measured(card))


def next_batch_tail(prev: float | None, windows: Mapping[str, WindowLoad]) -> float | None:
    """The batches' tail over their mean after one window: the tail ratios the instances
    measured (`WindowLoad.tail_ratio`), averaged over the variants that served by their
    batches, then into the running figure (the first one is taken as it is). Windows of
    instances in their warm-in do not count (live, a fresh worker's first batches put the
    ratio at 4.9, and every batch size of every variant fell out). A window with none
    leaves the figure as it was: a host's jitter is not gone because nothing ran."""
    seen = [
        (w.tail_ratio, w.batches)
        for w in windows.values()
        if w.tail_ratio and w.batches and not w.warming
    ]
    batches = sum(b for _, b in seen)
    if batches <= 0:
        return prev
    mean = sum(ratio * b for ratio, b in seen) / batches
    return mean if prev is None else (1.0 - WEIGHT) * prev + WEIGHT * mean


def stretch(load: WindowLoad, factor: float) -> float | None:
    """How far the host stretched the tail in one window: the answered p99 over the
    profiled t_exec at `factor` of its speed (at least 1); None without a p99, or where
    instances batch (their wait for a batch is planned)."""
    if load.p99_ms is None or load.completed <= 0 or load.batch_size != 1:
        return None
    forward_ms = load.profiled_ms / max(factor, LOWEST)
    return max(1.0, load.p99_ms / max(forward_ms, 1e-6))


def next_tail(
    prev: float | None,
    windows: Mapping[str, WindowLoad],
    own: Mapping[str, float],
    host: float,
    cfg: ModellessConfig,
) -> float | None:
    """The host's tail stretch after one window: the windows' stretches averaged by
    answers, then into the running figure (the first measurement is taken as it is).
    Without one, the figure comes `capacity_recovery` of the way back to 1."""
    seen = {}
    for variant, load in windows.items():
        ratio = stretch(load, own.get(variant, host))
        if ratio is not None:
            seen[variant] = ratio
    answers = sum(windows[v].completed for v in seen)
    if answers <= 0:
        return None if prev is None else prev + (1.0 - prev) * cfg.capacity_recovery
    mean = sum(ratio * windows[v].completed for v, ratio in seen.items()) / answers
    return mean if prev is None else (1.0 - WEIGHT) * prev + WEIGHT * mean


def per_core_here(card: VariantCard, capacity: Capacity) -> float:
    """Requests a second per core the card sustains at the host's speed (`Capacity.host`,
    the same factor for every variant): its profile's order, except that batches the
    SLO no longer allows at that speed and the batches' measured tail drop out. As
    profiled, fp32 of lstm-2365 serves 340 rps a core at batch 8 against bf16's 278; at
    0.75 of that speed its batches past 1 miss half the SLO and it serves 52 against
    bf16's 208 — ranked by the profile, the load stayed on fp32 through a live peak,
    refusing three quarters of it."""
    return qps_here(card, capacity, capacity.host) / card.cpus


def outserves(target: VariantCard, others: Sequence[VariantCard], capacity: Capacity) -> bool:
    """Whether `target` serves `HANDOVER_MARGIN` more per core at the host's speed than
    each of `others` (`per_core_here`): their cores are then worth more as its instances."""
    mine = per_core_here(target, capacity)
    return all(mine >= HANDOVER_MARGIN * per_core_here(o, capacity) for o in others)

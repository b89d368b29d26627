"""A variant's figures as the policies use them: `VariantCard`, one per ready variant.

A card comes from a profile and the model's SLO. It holds:

- the inference latency at batch 1, at the best core count: a query's latency goal is
  checked against it;
- the configuration <b, c> that serves the most requests per core within the SLO
  (INFless's feasibility: t_exec <= SLO for b = 1, t_exec <= SLO/2 for larger batches);
- from that configuration, the saturation throughput per instance Q, the hardware cost per
  instance C (cores) and the cost per request C/Q.

`sustained_qps` is Q where the variant runs slower than profiled and a batch's tail
stretches past its mean; `meets_slo_at` says whether it still meets the SLO there at all.
Cards judge the points measured on CPU cores only: a variant's GPU points price GPU
instances (`latency`), while the cores a card counts are what vertical scaling hands
between variants. Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from infless.modelless.profiles import VariantProfile, variant_function


@dataclass(frozen=True, slots=True)
class VariantCard:
    name: str  # the variant ("int8")
    function: str  # the function serving it ("minilm--int8")
    accuracy: float
    latency_b1_ms: float  # inference latency of one query, best core count
    batch_size: int  # the configuration that serves most requests per core within the SLO
    cpus: int
    exec_ms: float  # t_exec at that configuration
    qps: float  # saturation throughput of one instance at that configuration (Q)
    load_ms: float
    peak_memory_bytes: int
    # the profile's points (b, c, t_exec ms) and the SLO they were judged against
    points: tuple[tuple[int, int, float], ...] = ()
    slo_ms: float = 0.0

    @property
    def cost_per_request(self) -> float:
        """Core-seconds one request costs at saturation (C / Q)."""
        return self.cpus / self.qps


def feasible(batch_size: int, exec_ms: float, slo_ms: float) -> bool:
    return exec_ms <= (slo_ms if batch_size == 1 else slo_ms / 2.0)


def card_for(profile: VariantProfile, slo_ms: float) -> VariantCard | None:
    """The card of a ready, profiled variant (None: not ready, or nothing fits the SLO)."""
    latency = profile.cpu_latency
    if profile.status != "ready" or profile.accuracy is None or not latency:
        return None
    b1 = [p.measured_ms for p in latency if p.batch_size == 1]
    fits = [p for p in latency if feasible(p.batch_size, p.measured_ms, slo_ms)]
    if not b1 or not fits:
        return None
    best = max(fits, key=lambda p: (p.batch_size * 1000.0 / p.measured_ms / p.cpus, -p.cpus))
    return VariantCard(
        name=profile.name,
        function=variant_function(profile.model, profile.name),
        accuracy=profile.accuracy,
        latency_b1_ms=min(b1),
        batch_size=best.batch_size,
        cpus=best.cpus,
        exec_ms=best.measured_ms,
        qps=best.batch_size * 1000.0 / best.measured_ms,
        load_ms=profile.load_ms or 0.0,
        peak_memory_bytes=profile.peak_memory_bytes or 0,
        points=tuple((p.batch_size, p.cpus, p.measured_ms) for p in latency),
        slo_ms=slo_ms,
    )


def slo_problem(profile: VariantProfile, slo_ms: float) -> str | None:
    """Why a ready variant has no card: it was not profiled, or no profiled configuration
    fits the SLO (naming its fastest batch-1 time); None when it has a card."""
    if profile.status != "ready":
        return None
    if profile.accuracy is None or not profile.cpu_latency:
        return "not profiled"
    if card_for(profile, slo_ms) is not None:
        return None
    b1 = [p.measured_ms for p in profile.cpu_latency if p.batch_size == 1]
    if not b1:
        return f"batch 1 was not profiled (SLO {slo_ms:g} ms)"
    return (
        f"batch 1 takes {min(b1):.1f} ms here and no larger batch fits half the SLO: "
        f"cannot meet the {slo_ms:g}-ms SLO on this host"
    )


def cards_for(profiles: Iterable[VariantProfile], slo_ms: float) -> tuple[VariantCard, ...]:
    """The cards of every usable variant, cheapest per request first."""
    cards = [c for c in (card_for(p, slo_ms) for p in profiles) if c is not None]
    return tuple(sorted(cards, key=lambda c: (c.cost_per_request, -c.accuracy, c.name)))


def _times_here(
    points: Sequence[tuple[int, float]], factor: float, measured: Mapping[int, float] | None
) -> dict[int, float]:
    """Each of `points`' batch sizes (b, t_exec ms) and its time here: what the variant's
    instances measured for it where they did, else t_exec at `factor` of its speed."""
    f = max(factor, 1e-3)
    here = {b: t / f for b, t in points}
    if measured:
        here.update((b, ms) for b, ms in measured.items() if b in here and ms > 0)
    return here


def _best_rate(
    points: Sequence[tuple[int, float]],
    factor: float,
    tail: float,
    slo_ms: float,
    measured: Mapping[int, float] | None,
) -> float:
    """Requests a second at the best of `points` (b, t_exec ms) still feasible for the SLO
    here: a batch takes its time here (`_times_here`), is judged at that time · `tail`, as
    the data plane judges a batch (`ExecModel.capacity_rps`), and serves b per that time.
    With none feasible, the smallest batch's rate."""
    here = _times_here(points, factor, measured)
    fits = [b * 1000.0 / ms for b, ms in here.items() if feasible(b, ms * tail, slo_ms)]
    if fits:
        return max(fits)
    b = min(here)
    return b * 1000.0 / here[b]


def sustained_qps(
    card: VariantCard,
    factor: float,
    tail: float = 1.0,
    measured: Mapping[int, float] | None = None,
) -> float:
    """Q here: the batch size at the card's core count serving the most requests while
    still feasible for the SLO at its tail, where the variant runs at `factor` of its
    profiled speed, a batch's service time at its tail is `tail` times its mean
    (`Capacity.batch_stretch`), and the batch sizes its instances measured take what they
    measured (`measured`: a slower host, a noisier one, or a batch size that slows down
    more than the others may leave the variant smaller batches). Without profiled points,
    Q · factor; with no batch size feasible, batch 1's rate. Live, torchscript's batch 8 of
    lstm-2365 (22.5 ms profiled, 25 allowed at a 50-ms SLO) fitted by its mean at a host
    factor of 0.91, and vertical scaling moved a peak there counting 328 rps an instance;
    its tail did not fit, so the data plane kept its batches small, and it refused three
    quarters of the peak."""
    mine = [(b, t) for b, c, t in card.points if c == card.cpus and t > 0]
    if not mine:
        return card.qps * max(factor, 1e-3)
    return _best_rate(mine, factor, tail, card.slo_ms, measured)


def meets_slo_at(
    card: VariantCard,
    factor: float,
    tail: float = 1.0,
    measured: Mapping[int, float] | None = None,
) -> bool:
    """Whether some batch size of the card is still feasible for the SLO at its tail here
    (`sustained_qps`' terms; without profiled points: yes, as admitted)."""
    mine = [(b, t) for b, c, t in card.points if c == card.cpus and t > 0]
    here = _times_here(mine, factor, measured)
    return not here or any(feasible(b, ms * tail, card.slo_ms) for b, ms in here.items())


def instance_qps(
    card: VariantCard,
    batch_size: int,
    cpus: int,
    factor: float,
    tail: float = 1.0,
    measured: Mapping[int, float] | None = None,
) -> float:
    """What one instance of the variant at <batch_size, cpus> sustains here: the best batch
    up to its own that is feasible at its tail (`sustained_qps`' terms: the data plane
    serves no larger batch); the card's own Q there where the profile has no point at
    those cores and batch sizes."""
    mine = [(b, t) for b, c, t in card.points if c == cpus and b <= batch_size and t > 0]
    if not mine:
        return sustained_qps(card, factor, tail, measured)
    return _best_rate(mine, factor, tail, card.slo_ms, measured)


def instances_needed(qps: float, load_rps: float, slack: float) -> int:
    """Instances sustaining `qps` each that carry `load_rps` with `slack` headroom (at least
    one)."""
    return max(1, math.ceil(load_rps * (1.0 + slack) / qps - 1e-9))


def accuracy_range(cards: Sequence[VariantCard]) -> tuple[float, float]:
    if not cards:
        return (0.0, 0.0)
    accuracies = [c.accuracy for c in cards]
    return (min(accuracies), max(accuracies))

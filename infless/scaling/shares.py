"""Batch-aware dispatch shares (INFless §3.2): each instance's request rate r_i within
[r_low, r_up], by the three regimes, and which instances to release below the band.

With R the function's demand, R_max = Σ r_up and R_min = Σ r_low over its ready instances:

(i)   R > R_max: every instance gets r_up; the residual R − R_max goes to the autoscaler.
(ii)  band ≤ R ≤ R_max: r_i = r_up − (R_max − R)/(R_max − R_min)·(r_up − r_low), so Σ r_i = R.
(iii) R < band: release instances (never breaking cover, Σ r_up ≥ R), then recompute.

The band's lower edge is R_min + α·(R_max − R_min) = α·R_max + (1 − α)·R_min: Constraint (7)
of the paper and the reference dispatcher (`rps ≥ MinCap + 0.8·(MaxCap − MinCap)`). §3.2's
text prints αR_min + (1 − α)R_max, which with α = 0.8 contradicts its own "as close to the
upper bound as possible"; set alpha = 0.2 for that reading.

Releases: with w_i = α·r_up + (1 − α)·r_low the kept set is in the band iff Σ w ≤ R ≤ Σ r_up.
Greedily, while Σ w > R, release the instance whose removal keeps Σ r_up ≥ R, preferring
removals after which the kept instances are not underfed (Σ r_low ≤ R), then the lowest
`release_rank` (the planner passes resource efficiency: least efficient go first). At most
n² cheap steps for n instances of one function; the reference code enumerates 2^n subsets.

When no release helps and R < R_min, shares are clamped to r_low (the dispatcher only uses the
ratios, so each instance then gets R · r_low_i / R_min). Shares always lie in [r_low, r_up].
Pure: no I/O, no clock.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

_EPS = 1e-9


class Regime(enum.Enum):
    ABOVE = "above"  # (i): demand exceeds R_max
    BAND = "band"  # (ii)
    BELOW = "below"  # (iii): demand under the band even after releasing what can go
    IDLE = "idle"  # no ready instance


@dataclass(frozen=True, slots=True)
class ShareInput:
    """One ready instance as the share computation sees it."""

    instance_id: str
    r_low_rps: float
    r_up_rps: float
    releasable: bool = True
    release_rank: float = 0.0  # lower is released first


@dataclass(frozen=True, slots=True)
class InstanceShare:
    instance_id: str
    share_rps: float
    r_low_rps: float
    r_up_rps: float


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareDecision:
    regime: Regime
    demand_rps: float
    r_min_rps: float  # Σ r_low of the kept instances
    r_max_rps: float  # Σ r_up of the kept instances
    shares: tuple[InstanceShare, ...]  # the kept instances
    residual_rps: float  # R − R_max when positive: what new instances must cover
    release: tuple[str, ...]  # instance ids to release (drain, then stop)


def band_floor_rps(r_min_rps: float, r_max_rps: float, alpha: float) -> float:
    """The lowest demand of regime (ii): R_min + α·(R_max − R_min)."""
    return r_min_rps + alpha * (r_max_rps - r_min_rps)


def regime_of(demand_rps: float, r_min_rps: float, r_max_rps: float, alpha: float) -> Regime:
    if r_max_rps <= 0:
        return Regime.IDLE
    if demand_rps > r_max_rps + _EPS:
        return Regime.ABOVE
    if demand_rps + _EPS >= band_floor_rps(r_min_rps, r_max_rps, alpha):
        return Regime.BAND
    return Regime.BELOW


def interpolated_shares(
    instances: Sequence[ShareInput], demand_rps: float
) -> tuple[InstanceShare, ...]:
    """Regime (ii)'s formula, clamped to each instance's [r_low, r_up] outside the band."""
    r_min = sum(i.r_low_rps for i in instances)
    r_max = sum(i.r_up_rps for i in instances)
    span = r_max - r_min
    fraction = 0.0 if span <= _EPS else (r_max - demand_rps) / span
    fraction = min(1.0, max(0.0, fraction))
    return tuple(
        InstanceShare(
            i.instance_id,
            i.r_up_rps - fraction * (i.r_up_rps - i.r_low_rps),
            i.r_low_rps,
            i.r_up_rps,
        )
        for i in instances
    )


def choose_releases(
    instances: Sequence[ShareInput],
    demand_rps: float,
    alpha: float,
    min_keep: int = 0,
    cover_rps: float | None = None,
) -> tuple[str, ...]:
    """Instances to release so the rest is in the band (or as close as cover allows).

    Cover: the kept Σ r_up never drops below `cover_rps` (default: the demand itself).
    """
    cover = demand_rps if cover_rps is None else max(demand_rps, cover_rps)
    kept = list(instances)
    sum_up = sum(i.r_up_rps for i in kept)
    sum_low = sum(i.r_low_rps for i in kept)
    released: list[str] = []

    def weight(i: ShareInput) -> float:
        return alpha * i.r_up_rps + (1.0 - alpha) * i.r_low_rps

    sum_w = sum(weight(i) for i in kept)
    while sum_w > demand_rps + _EPS and len(kept) > min_keep:
        best: tuple[bool, bool, float, float, str] | None = None
        best_index = -1
        for index, candidate in enumerate(kept):
            if not candidate.releasable:
                continue
            if sum_up - candidate.r_up_rps + _EPS < cover:
                continue  # would break cover
            # one that can serve nothing (r_up 0: unpriced, or over its SLO) goes first, so
            # `min_keep` never keeps it in place of one that serves
            serves = candidate.r_up_rps > _EPS
            underfed = sum_low - candidate.r_low_rps > demand_rps + _EPS
            key = (
                serves,
                underfed,
                candidate.release_rank,
                -candidate.r_up_rps,
                candidate.instance_id,
            )
            if best is None or key < best:
                best, best_index = key, index
        if best is None:
            break
        gone = kept.pop(best_index)
        released.append(gone.instance_id)
        sum_up -= gone.r_up_rps
        sum_low -= gone.r_low_rps
        sum_w -= weight(gone)
    return tuple(released)


def dispatch_shares(
    instances: Sequence[ShareInput],
    demand_rps: float,
    alpha: float = 0.8,
    min_keep: int = 0,
    cover_rps: float | None = None,
) -> ShareDecision:
    """The three regimes of §3.2 for one function's ready instances and demand R.

    `min_keep` instances always stay; releases keep Σ r_up ≥ `cover_rps` (default R).
    """
    demand_rps = max(0.0, demand_rps)
    r_max = sum(i.r_up_rps for i in instances)
    r_min = sum(i.r_low_rps for i in instances)
    regime = regime_of(demand_rps, r_min, r_max, alpha)
    if regime is Regime.IDLE:
        return ShareDecision(
            regime=regime,
            demand_rps=demand_rps,
            r_min_rps=0.0,
            r_max_rps=0.0,
            shares=(),
            residual_rps=demand_rps,
            release=(),
        )
    if regime is Regime.ABOVE:
        shares = tuple(
            InstanceShare(i.instance_id, i.r_up_rps, i.r_low_rps, i.r_up_rps) for i in instances
        )
        return ShareDecision(
            regime=regime,
            demand_rps=demand_rps,
            r_min_rps=r_min,
            r_max_rps=r_max,
            shares=shares,
            residual_rps=demand_rps - r_max,
            release=(),
        )
    release: tuple[str, ...] = ()
    kept = list(instances)
    if regime is Regime.BELOW:
        release = choose_releases(instances, demand_rps, alpha, min_keep, cover_rps)
        gone = set(release)
        kept = [i for i in instances if i.instance_id not in gone]
        r_max = sum(i.r_up_rps for i in kept)
        r_min = sum(i.r_low_rps for i in kept)
        regime = regime_of(demand_rps, r_min, r_max, alpha)
        if regime is Regime.IDLE:
            return ShareDecision(
                regime=regime,
                demand_rps=demand_rps,
                r_min_rps=0.0,
                r_max_rps=0.0,
                shares=(),
                residual_rps=0.0,
                release=release,
            )
    return ShareDecision(
        regime=regime,
        demand_rps=demand_rps,
        r_min_rps=r_min,
        r_max_rps=r_max,
        shares=interpolated_shares(kept, demand_rps),
        residual_rps=0.0,
        release=release,
    )

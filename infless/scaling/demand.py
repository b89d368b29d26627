"""Per-function arrival rate from recent arrivals, robust to bursts.

Arrivals are counted in buckets of `bucket_s`. Two readings come out of one estimate.

The planning rate (`Demand.rates_rps`), what capacity is provisioned for:

    max(short-window rate + (short/2 + lookahead) · growth, long-window rate,
        previous planning rate · exp(−Δt / decay_tau_s))

- the short window (2 s) reacts to a burst within about its length ("fast attack"), and on
  a rise the growth per second (newer half of the short window against the older half, only
  when positive and beyond Poisson noise) is extrapolated `trend_lookahead_s` ahead — about
  a tick plus a cold start, the time a new instance needs before it serves. A step reads as
  a steep ramp for the second or two it spans: the estimate overshoots (about three times
  the new rate at a step from a low one), and the capacity it starts absorbs the backlog
  the step builds while instances start (in the simulator's bursty loads, a step read as
  the new rate had 2.7 times the violations at 6 % fewer cores);
- the decaying previous estimate holds the rate up after a burst ends and lets it fall with
  time constant tau ("slow decay"), so a function is not scaled in between two bursts and the
  §3.2 band is not left on every dip;
- the long window (30 s) keeps a sporadic load (a request every few seconds) from reading 0.

The measured rate (`Demand.measured_rps`), what arrives — for choices that must not flip
on an overshoot, such as which variant carries a model-less application:

    max(short-window rate, long-window rate, latest rate while rising,
        previous measured rate · exp(−Δt / decay_tau_s))

  where the latest rate is that of the last `LATEST_BUCKETS` whole buckets, counted once the
  newer half of the short window holds more arrivals than its older half beyond noise: a
  step reads as the new rate within half a second, never beyond it.

A window's rate divides its count by the time it really covers (whole past buckets plus the
elapsed part of the current one), so partial buckets neither inflate nor hide a burst.

The shell counts arrivals per function (an int per request) and hands them over once per
tick with `record_interval` (the arrivals since its last look, spread evenly over the
buckets that interval covers: all of them in the bucket of `now` would read as a burst
when `now` has just begun a bucket), or `record_times` with timestamps; `estimate` is
called at plan time.
Pure: no I/O, no clock — `now_s` is always an argument; state in, state out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from infless.scaling.config import DemandConfig


@dataclass(frozen=True, slots=True)
class Demand:
    """The arrival rate (requests per second) of each function at one instant: the rate to
    plan capacity for, and — where known — the rate measured, without lookahead."""

    rates_rps: Mapping[str, float] = field(default_factory=dict)
    measured_rps: Mapping[str, float] = field(default_factory=dict)

    def rate_rps(self, function: str) -> float:
        return self.rates_rps.get(function, 0.0)

    def measured_rate_rps(self, function: str) -> float:
        """The measured rate; the planning rate where none was measured (a demand handed
        in from outside)."""
        return self.measured_rps.get(function, self.rate_rps(function))


@dataclass(frozen=True, slots=True)
class RateTrack:
    """One function's recent arrivals: counts of consecutive buckets, oldest first."""

    first_bucket: int
    counts: tuple[int, ...]
    since_bucket: int  # the first bucket ever recorded: windows never reach before it
    estimate_rps: float = 0.0
    estimated_at_s: float | None = None
    measured_rps: float = 0.0  # the measured rate held (decaying) since `estimated_at_s`


@dataclass(frozen=True, slots=True)
class DemandState:
    tracks: Mapping[str, RateTrack] = field(default_factory=lambda: MappingProxyType({}))


LATEST_BUCKETS = 2  # a risen rate is measured over this many whole buckets (0.5 s at 0.25 s)


def _bucket(at_s: float, cfg: DemandConfig) -> int:
    return math.floor(at_s / cfg.bucket_s)


def _keep_buckets(cfg: DemandConfig) -> int:
    return math.ceil(cfg.long_window_s / cfg.bucket_s) + 1


def _add(track: RateTrack | None, bucket: int, count: int, cfg: DemandConfig) -> RateTrack:
    if track is None:
        return RateTrack(bucket, (count,), bucket)
    counts = list(track.counts)
    first = track.first_bucket
    last = first + len(counts) - 1
    if bucket > last:
        counts.extend([0] * (bucket - last))
    elif bucket < first:  # late report for a bucket already dropped or before the first
        if first - bucket >= _keep_buckets(cfg):
            return track
        counts[:0] = [0] * (first - bucket)
        first = bucket
        track = replace(track, since_bucket=min(track.since_bucket, bucket))
    counts[bucket - first] += count
    keep = _keep_buckets(cfg)
    if len(counts) > keep:
        first += len(counts) - keep
        counts = counts[-keep:]
    return replace(track, first_bucket=first, counts=tuple(counts))


def record(
    state: DemandState, function: str, count: int, at_s: float, cfg: DemandConfig
) -> DemandState:
    """`count` arrivals of `function` at time `at_s` (all in the bucket holding `at_s`)."""
    if count < 0:
        raise ValueError(f"count = {count}: arrivals cannot be negative")
    track = _add(state.tracks.get(function), _bucket(at_s, cfg), count, cfg)
    tracks = dict(state.tracks)
    tracks[function] = track
    return DemandState(MappingProxyType(tracks))


def record_interval(
    state: DemandState,
    function: str,
    count: int,
    start_s: float,
    end_s: float,
    cfg: DemandConfig,
) -> DemandState:
    """`count` arrivals of `function` somewhere in [start_s, end_s), spread evenly over the
    buckets that interval covers (whole arrivals: cumulative rounding)."""
    if count < 0:
        raise ValueError(f"count = {count}: arrivals cannot be negative")
    if end_s <= start_s:
        return record(state, function, count, end_s, cfg)
    first, last = _bucket(start_s, cfg), _bucket(end_s - 1e-9, cfg)
    track = state.tracks.get(function)
    placed = 0
    for bucket in range(first, last + 1):
        covered_until_s = min(end_s, (bucket + 1) * cfg.bucket_s)
        share = round(count * (covered_until_s - start_s) / (end_s - start_s)) - placed
        if share or track is None:
            track = _add(track, bucket, share, cfg)
        placed += share
    assert track is not None
    tracks = dict(state.tracks)
    tracks[function] = track
    return DemandState(MappingProxyType(tracks))


def record_times(
    state: DemandState, function: str, arrivals_s: Iterable[float], cfg: DemandConfig
) -> DemandState:
    """Arrivals of `function` given by their timestamps (any order)."""
    per_bucket: dict[int, int] = {}
    for at_s in arrivals_s:
        bucket = _bucket(at_s, cfg)
        per_bucket[bucket] = per_bucket.get(bucket, 0) + 1
    track = state.tracks.get(function)
    if track is None and not per_bucket:
        return state
    for bucket in sorted(per_bucket):
        track = _add(track, bucket, per_bucket[bucket], cfg)
    assert track is not None
    tracks = dict(state.tracks)
    tracks[function] = track
    return DemandState(MappingProxyType(tracks))


def window_rate_rps(track: RateTrack, window_s: float, now_s: float, cfg: DemandConfig) -> float:
    """Arrivals per second over the last `window_s` (whole buckets ending at `now_s`'s).

    A function seen for less than the window is averaged over the time it has been seen.
    """
    now_bucket = _bucket(now_s, cfg)
    n_buckets = max(1, round(window_s / cfg.bucket_s))
    n_buckets = max(1, min(n_buckets, now_bucket - track.since_bucket + 1))
    oldest = now_bucket - n_buckets + 1
    first = track.first_bucket
    total = 0
    for offset, count in enumerate(track.counts):
        bucket = first + offset
        if oldest <= bucket <= now_bucket:
            total += count
    elapsed_in_current_s = now_s - now_bucket * cfg.bucket_s
    covered_s = (n_buckets - 1) * cfg.bucket_s + max(elapsed_in_current_s, 1e-3 * cfg.bucket_s)
    return total / covered_s


def _count(track: RateTrack, oldest: int, newest: int) -> int:
    """Arrivals in buckets oldest..newest (inclusive)."""
    lo = max(oldest - track.first_bucket, 0)
    hi = min(newest - track.first_bucket + 1, len(track.counts))
    return sum(track.counts[lo:hi]) if hi > lo else 0


def trend_rps_per_s(track: RateTrack, now_s: float, cfg: DemandConfig) -> float:
    """How fast the rate grows (RPS per second); a growth within Poisson noise reads as 0.

    Compares the newer half of the short window with the older half, on whole buckets. A
    growth of counts within `trend_z` standard deviations (√(n_new + n_old)) is noise: most
    ticks of a steady load would otherwise bump the estimate and start capacity for nothing.
    A growth beyond it is a ramp and counts in full.
    """
    half = max(1, round(cfg.short_window_s / 2.0 / cfg.bucket_s))
    last_whole = _bucket(now_s, cfg) - 1
    if last_whole - 2 * half + 1 < track.since_bucket:
        return 0.0
    newer = _count(track, last_whole - half + 1, last_whole)
    older = _count(track, last_whole - 2 * half + 1, last_whole - half)
    half_s = half * cfg.bucket_s
    growth = (newer - older) / half_s / half_s
    if 0 <= newer - older <= cfg.trend_z * math.sqrt(newer + older):
        return 0.0  # within noise
    return growth


def _latest_rate_rps(track: RateTrack, now_s: float, cfg: DemandConfig) -> float:
    """The rate over the last `LATEST_BUCKETS` whole buckets."""
    last_whole = _bucket(now_s, cfg) - 1
    count = _count(track, last_whole - LATEST_BUCKETS + 1, last_whole)
    return count / (LATEST_BUCKETS * cfg.bucket_s)


def estimate(state: DemandState, now_s: float, cfg: DemandConfig) -> tuple[Demand, DemandState]:
    """The current demand of every tracked function, and the state holding the new peaks."""
    rates: dict[str, float] = {}
    measured: dict[str, float] = {}
    tracks: dict[str, RateTrack] = {}
    for function, track in state.tracks.items():
        short = window_rate_rps(track, cfg.short_window_s, now_s, cfg)
        long = window_rate_rps(track, cfg.long_window_s, now_s, cfg)
        growth = trend_rps_per_s(track, now_s, cfg)
        seen = max(short, long)
        if growth > 0:  # risen beyond noise: the latest arrivals are the rate
            seen = max(seen, _latest_rate_rps(track, now_s, cfg))
        ahead = short
        if cfg.trend_lookahead_s > 0:  # the window's mean lags its end by half its length
            ahead_s = cfg.short_window_s / 2.0 + cfg.trend_lookahead_s
            ahead += ahead_s * max(0.0, growth)
        decay = 0.0
        if track.estimated_at_s is not None:
            decay = math.exp(-max(0.0, now_s - track.estimated_at_s) / cfg.decay_tau_s)
        rate = max(ahead, long, track.estimate_rps * decay)
        held = max(seen, track.measured_rps * decay)
        rates[function] = rate
        measured[function] = held
        tracks[function] = replace(
            track, estimate_rps=rate, estimated_at_s=now_s, measured_rps=held
        )
    demand = Demand(MappingProxyType(rates), MappingProxyType(measured))
    return demand, DemandState(MappingProxyType(tracks))


def forget(state: DemandState, function: str) -> DemandState:
    """Drop a removed function's history."""
    if function not in state.tracks:
        return state
    tracks = {k: v for k, v in state.tracks.items() if k != function}
    return DemandState(MappingProxyType(tracks))

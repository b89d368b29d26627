"""What share of its profiled throughput each variant delivers here and now.

Profiles time the forward pass on an idle core (thread CPU clock). A worker serving
beside the gateway, the client and other workers runs slower: on a 2-core machine about
half as fast. It also pays for decoding and encoding its batches.

The monitor measures that share in every window where a variant served at least
`capacity_min_batches` batches. The share is the profile's t_exec at the mean batch
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
`capacity_recovery` of the gap per window. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from infless.modelless.config import ModellessConfig
from infless.modelless.states import WindowLoad

LOWEST, HIGHEST = 0.05, 2.0  # a factor is kept within these bounds
WEIGHT = 0.5  # of a new observation in the running averages
SATURATED = 0.2  # share of a window's arrivals refused: the variant is at capacity


@dataclass(frozen=True, slots=True)
class Capacity:
    """An application's capacity factors: measured / profiled throughput."""

    host: float = 1.0  # for a variant never measured
    own: Mapping[str, float] = field(default_factory=dict)  # by variant, from its windows

    def factor(self, variant: str) -> float:
        return self.own.get(variant, self.host)


def observed(load: WindowLoad, min_batches: int) -> float | None:
    """Profiled over measured service time per batch in one window; None with too few
    batches to say."""
    if load.batches < max(1, min_batches) or load.service_ms <= 0 or load.profiled_ms <= 0:
        return None
    ratio = load.profiled_ms * load.batches / load.service_ms
    return min(HIGHEST, max(LOWEST, ratio))


def delivered(load: WindowLoad) -> float | None:
    """In a window where the variant refused `SATURATED` of its arrivals or more with as
    many replicas throughout (not one that started or stopped one): the share of the
    window its replicas would have been busy serving what they served at profiled speed —
    at capacity they are busy all along, so that share is what they sustain against their
    profile, gaps between batches included. None otherwise."""
    if not load.stable or load.replicas <= 0 or load.window_s <= 0:
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
    return Capacity(host, own)

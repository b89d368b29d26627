"""The arrival rates model-less vertical scaling plans with: one estimate per application
(all its queries, whichever variant served them — the sum of the variants' own estimates
would count traffic that moved between them twice) and one per variant's pinned queries
(those whose goals exclude the target, or that named the variant), from the catalogue's
traffic counters. The same estimator as any function's demand (`scaling.demand`). Pure:
no I/O, no clock (the caller passes the time).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from infless.modelless.catalog import ModelReading
from infless.scaling.config import DemandConfig
from infless.scaling.demand import Demand, DemandState, estimate, record_interval


def app_key(model: str) -> str:
    """The estimate's key for all of `model`'s queries."""
    return f"app:{model}"


def pinned_key(function: str) -> str:
    """The estimate's key for the queries pinned to a variant's function."""
    return f"pinned:{function}"


def count_arrivals(
    readings: Sequence[ModelReading],
    counts: DemandState,
    seen: Mapping[str, int],
    since: float | None,
    now: float,
    cfg: DemandConfig,
) -> tuple[Demand, DemandState, dict[str, int]]:
    """One arrival-rate estimate per application and per variant's pinned queries, from the
    traffic counters (`since` None: the counters are read, no interval recorded). `counts`
    is the estimator's state and `seen` the counters read last time. Returns the estimate,
    the estimator's new state and the counters seen."""
    read = dict(seen)
    for reading in readings:
        entry, traffic = reading.entry, reading.traffic
        counters = {app_key(entry.model): traffic.arrivals}
        for card in entry.catalogue.cards:
            counters[pinned_key(card.function)] = traffic.pinned.get(card.name, 0)
        for key, count in counters.items():
            new = max(0, count - read.get(key, 0))
            read[key] = count
            if since is not None:
                counts = record_interval(counts, key, new, since, now, cfg)
    estimated, counts = estimate(counts, now, cfg)
    return estimated, counts, read

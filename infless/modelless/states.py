"""The live state of each variant (INFaaS §3, Figure 4): Inactive, Active, Overloaded or
Interfered, from what its instances did over the last monitoring window.

The reference (`query_executor.cc`, every second) blacklists a variant in two cases: its
mean latency passes `latency_factor` x its profiled inference latency while its rate
passes `qps_factor` of what the profile sustains; or its queue holds more than
`queue_factor` seconds of work. It is cleared only when the queue is back under the bound
and the latency under `recover_factor` x the profile.

Here the latency is the instances' mean *service* time per batch, against the profiled
t_exec at their batch size and cores. The queueing wait a batching platform adds on
purpose is not interference. The profiled rate is b / t_exec per replica. A refusal by
admission control (a 429: the variant is at capacity) counts as overload. High latency at
a low rate is Interfered; at a high rate, Overloaded. A window with no completed batch
decays the tracked latency (÷ `idle_decay`), so an idle variant recovers.
Pure: no I/O, no clock.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from infless.modelless.config import StateThresholds
from infless.modelless.profiles import VariantProfile


class VariantState(enum.Enum):
    INACTIVE = "inactive"  # no ready instance
    ACTIVE = "active"
    OVERLOADED = "overloaded"  # serving at its peak throughput
    INTERFERED = "interfered"  # slower than profiled, though not at its peak


@dataclass(frozen=True, slots=True)
class WindowLoad:
    """What a variant's ready instances did in one monitoring window."""

    replicas: int  # ready instances
    batch_size: int  # their batch size
    profiled_ms: float  # the profile's t_exec at that batch size and core count
    window_s: float
    completed: int = 0  # samples answered
    batches: int = 0  # batches served
    service_ms: float = 0.0  # summed service time of those batches
    queued: int = 0  # samples waiting now
    refused: int = 0  # samples refused for lack of capacity
    stable: bool = True  # as many ready instances at its start as at its end
    p99_ms: float | None = None  # the answered latency at its tail lately (None: too few)
    # its instances had served fewer than WARM_IN_BATCHES batches when it began: a fresh
    # worker's first calls pay one-time costs (kernels for input shapes not seen yet), so
    # such a window says nothing of the host's contention (the capacity factors skip it)
    warming: bool = False
    # their service time's tail over its mean, as the data plane measures it (None: not yet)
    tail_ratio: float | None = None
    # their mean service time per batch size now, as the data plane predicts it (empty:
    # none measured its tail yet), on this many cores each (the largest count among them)
    service_ms_by_batch: Mapping[int, float] = field(default_factory=dict)
    cpus: int = 1


# A variant's first batches after its instances start from none (live, fp32's first
# window read about a tenth of its profile's speed, its capacity factor fell to 0.53-0.61
# on it, and the application left fp32 on that one window; later windows put the factor
# at 0.99-1.08).
WARM_IN_BATCHES = 100


@dataclass(frozen=True, slots=True)
class Counters:
    """A variant's running totals (only grow): what a window is the difference of."""

    served: int = 0
    batches: int = 0
    exec_ms: float = 0.0  # the workers' forward time, summed
    refused: int = 0
    ready: int = 0  # instances ready at the reading (not a total)


def window_load(
    profile: VariantProfile,
    now: Counters,
    before: Counters,
    replicas: int,
    batch_size: int,
    cpus: int,
    queued: int,
    window_s: float,
    p99_ms: float | None = None,
    tail_ratio: float | None = None,
    service_ms_by_batch: Mapping[int, float] | None = None,
) -> WindowLoad:
    """The window between two readings of a variant's counters, with the profile's t_exec
    at the batch size its instances served on average (their batch size when idle)."""
    served, batches = max(0, now.served - before.served), max(0, now.batches - before.batches)
    mean_batch = served / batches if batches else float(batch_size)
    return WindowLoad(
        replicas=replicas,
        batch_size=batch_size,
        profiled_ms=profile.exec_ms(mean_batch, cpus) if profile.latency else 1.0,
        window_s=window_s,
        completed=served,
        batches=batches,
        service_ms=max(0.0, now.exec_ms - before.exec_ms) if batches else 0.0,
        queued=queued,
        refused=max(0, now.refused - before.refused),
        stable=now.ready == before.ready,
        p99_ms=p99_ms,
        warming=before.batches < WARM_IN_BATCHES,
        tail_ratio=tail_ratio,
        service_ms_by_batch=dict(service_ms_by_batch or {}),
        cpus=cpus,
    )


@dataclass(frozen=True, slots=True)
class Tracked:
    state: VariantState = VariantState.INACTIVE
    latency_ms: float = 0.0  # mean service time per batch, decayed when idle


def _factors(replicas: int, t: StateThresholds) -> tuple[float, float, float]:
    if replicas <= 1:
        return t.single_latency_factor, t.single_qps_factor, t.single_recover_factor
    return t.latency_factor, t.qps_factor, t.recover_factor


def next_state(prev: Tracked, load: WindowLoad, t: StateThresholds) -> Tracked:
    if load.replicas <= 0:
        return Tracked(VariantState.INACTIVE, 0.0)
    idle = load.batches == 0
    latency = prev.latency_ms / t.idle_decay if idle else load.service_ms / load.batches
    lat_f, qps_f, recover_f = _factors(load.replicas, t)
    profiled = max(load.profiled_ms, 1e-6)
    peak_qps = load.replicas * load.batch_size * 1000.0 / profiled
    qps = load.completed / load.window_s if load.window_s > 0 else 0.0
    queue_bound = t.queue_factor * peak_qps
    slow = latency > lat_f * profiled
    congested = load.queued > queue_bound or load.refused > 0
    if congested or (slow and qps > qps_f * peak_qps):
        return Tracked(VariantState.OVERLOADED, latency)
    if slow:
        return Tracked(VariantState.INTERFERED, latency)
    degraded = prev.state in (VariantState.OVERLOADED, VariantState.INTERFERED)
    if degraded and latency >= recover_f * profiled:
        return Tracked(prev.state, latency)  # not recovered yet: the hysteresis band
    return Tracked(VariantState.ACTIVE, latency)

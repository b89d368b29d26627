"""Pure batching decisions (INFless §3.2): batch size choice, batch timeout, queue bounds.

Pure: no I/O, no clock; every function takes the times it needs as arguments.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from infless.dataplane.config import BatchingConfig

DispatchMode = Literal["slo", "deadline", "adaptive", "eager"]


@dataclass(frozen=True, slots=True)
class BatchSettings:
    """How one instance batches: size b, how long the oldest request may wait, queue bound."""

    batch_size: int
    timeout_s: float
    capacity: int
    exec_ms: float
    mode: DispatchMode = "deadline"
    utilization: float = 0.6  # "slo": the busiest a worker may run on the smallest batch


def feasible(batch_size: int, exec_ms: float, slo_ms: float) -> bool:
    """INFless AvailableConfig: t_exec <= t_slo for b = 1, t_exec <= t_slo / 2 for b > 1."""
    limit_ms = slo_ms if batch_size == 1 else slo_ms / 2.0
    return exec_ms <= limit_ms


def choose_batch_size(exec_ms_by_batch: Mapping[int, float], slo_ms: float, max_batch: int) -> int:
    """The largest measured batch size <= max_batch that is feasible under the SLO (else 1)."""
    candidates = [
        b
        for b, exec_ms in exec_ms_by_batch.items()
        if b <= max_batch and feasible(b, exec_ms, slo_ms)
    ]
    return max(candidates, default=1)


def batch_timeout_s(slo_ms: float, exec_ms: float, slack_ms: float) -> float:
    """How long the oldest request may wait: t_slo - t_exec - slack, never negative."""
    return max(0.0, (slo_ms - exec_ms - slack_ms) / 1000.0)


def queue_capacity(batch_size: int, exec_ms: float, slo_ms: float, min_batches: int) -> int:
    """How many requests an instance may queue: `min_batches` full batches, or more while
    they still finish within the SLO.

    A request queued behind k full batches, with one batch running, is answered after about
    (k + 1) * t_exec: floor(t_slo / t_exec) - 1 batches fit. A fast model thus queues many
    batches instead of refusing requests it would answer in time; `min_batches` (the
    configured bound) absorbs bursts whatever t_exec is, and is what applies while t_exec is
    unknown. Beyond the bound a request goes to another instance, else 429.
    """
    within_slo = math.floor(slo_ms / exec_ms) - 1 if exec_ms > 0.0 else 0
    return batch_size * max(min_batches, within_slo)


def settle(
    exec_ms_by_batch: Mapping[int, float],
    slo_ms: float,
    max_batch: int,
    slack_ms: float,
    capacity_batches: int,
    mode: DispatchMode = "deadline",
    batch_size: int | None = None,
    utilization: float = 0.6,
) -> BatchSettings:
    """Batch settings for an instance from its measured (or predicted) execution times.

    b is the largest feasible size up to `max_batch`, or `batch_size` when it is fixed (the
    planner chose it, or the instance already runs with it); timeout and queue bound follow
    from t_exec at b.
    """
    if batch_size is None:
        batch_size = choose_batch_size(exec_ms_by_batch, slo_ms, max_batch)
    exec_ms = exec_ms_by_batch.get(batch_size, 0.0)
    return BatchSettings(
        batch_size=batch_size,
        timeout_s=batch_timeout_s(slo_ms, exec_ms, slack_ms),
        capacity=queue_capacity(batch_size, exec_ms, slo_ms, capacity_batches),
        exec_ms=exec_ms,
        mode=mode,
        utilization=utilization,
    )


def ewma(previous: float | None, sample: float, weight: float) -> float:
    """Exponentially weighted moving average; the first sample is taken as it is."""
    return sample if previous is None else previous + weight * (sample - previous)


def update_exec_ms(previous_ms: float | None, measured_ms: float, weight: float = 0.1) -> float:
    """EWMA of one batch size's execution time, fed by every batch an instance serves."""
    return ewma(previous_ms, measured_ms, weight)


def rescaled_exec_ms(
    table: Mapping[int, float], batch_size: int, measured_ms: float, weight: float = 0.1
) -> dict[int, float]:
    """An instance's execution times after it served a batch of `batch_size` in
    `measured_ms`: that size's EWMA, and every other size moved by the same share of the
    change — a host that slowed down (or sped up) is so at every batch size, not only at the
    sizes served lately, and the planner reads every size."""
    previous = table.get(batch_size)
    updated = dict(table)
    updated[batch_size] = update_exec_ms(previous, measured_ms, weight)
    if previous is None or previous <= 0:
        return updated
    scale = 1.0 + weight * (measured_ms / previous - 1.0)
    for size, value in table.items():
        if size != batch_size:
            updated[size] = value * scale
    return updated


def powers_of_two_up_to(limit: int) -> list[int]:
    sizes = [1]
    while sizes[-1] * 2 <= limit:
        sizes.append(sizes[-1] * 2)
    if sizes[-1] != limit:
        sizes.append(limit)
    return sizes


def dispatch_at(
    queue_length: int,
    batch_size: int,
    oldest_arrival_s: float,
    timeout_s: float,
    mode: DispatchMode,
    interarrival_s: float,
) -> float:
    """When a free worker should take the waiting batch, if no other request arrives.

    - "deadline" (INFless §3.2): when b requests wait (now), else when the oldest request
      has waited `timeout_s`.
    - "eager": now, whatever waits (lowest latency; batches still form while it is busy).
    - "adaptive": like "deadline", but no later than the moment when the missing requests,
      at the recent inter-arrival gap, could no longer arrive before the deadline: waiting
      beyond it only adds latency without filling the batch. Never later than the deadline.
    Returns -inf for "now" and +inf when nothing waits.
    """
    if queue_length <= 0:
        return math.inf
    if queue_length >= batch_size or mode == "eager":
        return -math.inf
    deadline_s = oldest_arrival_s + timeout_s
    if mode == "deadline":
        return deadline_s
    fill_eta_s = (batch_size - queue_length) * interarrival_s
    return min(deadline_s, deadline_s - fill_eta_s)


FILL_SLACK = 2.0  # "slo": a batch waits at most this many times its expected fill time


def slo_dispatch_at(
    queue_length: int,
    target: int,
    oldest_arrival_s: float,
    latest_start_s: float,
    interarrival_s: float,
) -> float:
    """When a free worker should take the waiting batch ("slo" dispatch).

    `target` is the smallest batch that sustains the recent arrival rate (see
    `ExecModel.smallest_sustaining`): once that many wait, now — a bigger batch would only
    add waiting. Before that, no later than `FILL_SLACK` times the time the target batch
    takes to fill at the recent inter-arrival gap (counted from the oldest arrival: when
    arrivals slow down, a batch does not wait for the ones that do not come), nor than
    `latest_start_s` (the oldest request's deadline less the batch's service time at its
    tail), and earlier when the missing requests could not arrive by then.
    -inf for "now", +inf when nothing waits.
    """
    if queue_length <= 0:
        return math.inf
    if queue_length >= target:
        return -math.inf
    fill_eta_s = (target - queue_length) * interarrival_s
    waited_enough_s = oldest_arrival_s + FILL_SLACK * target * interarrival_s
    return min(latest_start_s - fill_eta_s, waited_enough_s, latest_start_s)


def dispatch_due(
    queue_length: int,
    batch_size: int,
    oldest_arrival_s: float,
    timeout_s: float,
    now_s: float,
    mode: DispatchMode = "deadline",
    interarrival_s: float = math.inf,
) -> bool:
    """Whether a free worker should take a batch at `now_s` (see `dispatch_at`)."""
    due_s = dispatch_at(queue_length, batch_size, oldest_arrival_s, timeout_s, mode, interarrival_s)
    return now_s >= due_s


def update_interarrival(previous_s: float, gap_s: float, weight: float = 0.2) -> float:
    """EWMA of the gap between arrivals (infinite: none seen yet)."""
    return ewma(None if math.isinf(previous_s) else previous_s, gap_s, weight)


def instance_settings(
    batching: BatchingConfig,
    slo_ms: float,
    max_batch: int,
    exec_ms_by_batch: Mapping[int, float],
    fixed_batch: int | None,
) -> BatchSettings:
    """An instance's batching under the `[batching]` section: the largest feasible b (or
    the planner's fixed b), with the configured slack and dispatch mode."""
    slack_ms = batching.slack_ms + batching.slack_fraction * slo_ms
    return settle(
        exec_ms_by_batch,
        slo_ms,
        max_batch,
        slack_ms,
        batching.queue_capacity_batches,
        mode=batching.dispatch,
        batch_size=fixed_batch,
        utilization=batching.target_utilization,
    )

"""Pure batching decisions (INFless §3.2): batch size choice, batch timeout, queue bounds.

Pure: no I/O, no clock; every function takes the times it needs as arguments.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BatchSettings:
    """How one instance batches: size b, how long the oldest request may wait, queue bound."""

    batch_size: int
    timeout_s: float
    capacity: int
    exec_ms: float
    eager: bool = False


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


def settle(
    exec_ms_by_batch: Mapping[int, float],
    slo_ms: float,
    max_batch: int,
    slack_ms: float,
    capacity_batches: int,
    eager: bool = False,
) -> BatchSettings:
    """Batch settings for an instance from its measured (or predicted) execution times."""
    batch_size = choose_batch_size(exec_ms_by_batch, slo_ms, max_batch)
    exec_ms = exec_ms_by_batch.get(batch_size, 0.0)
    return BatchSettings(
        batch_size=batch_size,
        timeout_s=batch_timeout_s(slo_ms, exec_ms, slack_ms),
        capacity=batch_size * capacity_batches,
        exec_ms=exec_ms,
        eager=eager,
    )


def powers_of_two_up_to(limit: int) -> list[int]:
    sizes = [1]
    while sizes[-1] * 2 <= limit:
        sizes.append(sizes[-1] * 2)
    if sizes[-1] != limit:
        sizes.append(limit)
    return sizes


def dispatch_due(
    queue_length: int,
    batch_size: int,
    oldest_arrival_s: float,
    timeout_s: float,
    now_s: float,
    eager: bool = False,
) -> bool:
    """Whether a free worker should take a batch now.

    INFless ("deadline"): when b requests wait or the oldest has waited `timeout_s`.
    "eager": whenever anything waits (the worker is free, so waiting only adds latency;
    under load batches still fill while the worker is busy).
    """
    if queue_length <= 0:
        return False
    return eager or queue_length >= batch_size or now_s >= oldest_arrival_s + timeout_s

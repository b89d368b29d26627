"""The fluid mode's arithmetic for one instance over one step, from the data plane's own
rules (`sim.fluid` drives it):

- `admissible_queue`: the longest queue behind which a request is still admitted —
  `admission.finish_by_s` (the full batches ahead at their mean, its own batch at its
  tail) within the budget, scanned up to the queue bound; what an instance takes in a step
  is what it serves in it plus the room up to that queue;
- `latency_ms`: what the requests it admits in a step wait and take: behind a backlog, the
  finish `admission.finish_by_s` predicts for the middle of it; without one, the batch the
  release rule forms — "slo" dispatch: the smallest batch sustaining the instance's rate
  (`ExecModel.smallest_sustaining`), its fill time bounded by the deadline less the
  batch's tail (`release`); INFless's "deadline" dispatch: the full batch or the timeout —
  half its fill time on average, all of it at the tail, then its service;
- `LatencyHistogram`: answers weighted by their count, for the run's percentiles.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import math

from infless.dataplane import admission
from infless.dataplane.latency import ExecModel
from infless.dataplane.policy import BatchSettings

BIN_MS = 0.5  # the histogram's resolution
MAX_MS = 60_000.0


def admissible_queue(model: ExecModel, budget_s: float, capacity: int) -> int:
    """The longest queue (up to `capacity`) behind which every request is still admitted."""
    for queued in range(capacity + 1):
        if admission.finish_by_s(0.0, model, queued) > budget_s:
            return queued
    return capacity


def operating_batch(model: ExecModel, settings: BatchSettings, rate_rps: float) -> int:
    """The batch the release rule forms at `rate_rps` with no backlog."""
    if settings.mode == "slo":
        return max(
            1, min(settings.batch_size, model.smallest_sustaining(rate_rps, settings.utilization))
        )
    return settings.batch_size


def latency_ms(
    model: ExecModel,
    settings: BatchSettings,
    rate_rps: float,
    backlog: float,
    budget_s: float,
) -> tuple[float, float]:
    """(mean, tail) latency of the requests an instance admits at `rate_rps` with `backlog`
    requests waiting (see the module docstring)."""
    if backlog >= 1.0:
        middle = admission.finish_by_s(0.0, model, int(backlog / 2)) * 1000.0
        last = admission.finish_by_s(0.0, model, int(backlog)) * 1000.0
        return middle, last
    k = operating_batch(model, settings, rate_rps)
    fill_s = (k - 1) / rate_rps if rate_rps > 0 else 0.0
    if settings.mode == "slo":
        wait_bound_s = max(0.0, budget_s - model.tail_ms(k) / 1000.0)
    elif settings.mode == "eager":
        wait_bound_s = 0.0
    else:
        wait_bound_s = settings.timeout_s
    full_wait_s = min(fill_s, wait_bound_s)
    mean = full_wait_s / 2.0 * 1000.0 + model.mean_ms(k)
    tail = full_wait_s * 1000.0 + model.tail_ms(k)
    return mean, tail


def throughput_rps(model: ExecModel, batch_size: int) -> float:
    """Requests per second an instance serves running batches of `batch_size` back to back."""
    return batch_size * 1000.0 / max(model.mean_ms(batch_size), 1e-6)


class LatencyHistogram:
    """Answers' latencies weighted by count, in `BIN_MS` bins (beyond `MAX_MS`: the last)."""

    def __init__(self) -> None:
        self._bins = [0.0] * (int(MAX_MS / BIN_MS) + 1)
        self.count = 0.0

    def add(self, latency_ms: float, count: float) -> None:
        if count <= 0:
            return
        index = min(len(self._bins) - 1, max(0, int(latency_ms / BIN_MS)))
        self._bins[index] += count
        self.count += count

    def percentile(self, q: float) -> float:
        if self.count <= 0:
            return 0.0
        rank = q * self.count
        seen = 0.0
        for index, weight in enumerate(self._bins):
            seen += weight
            if seen >= rank and weight > 0:
                return (index + 0.5) * BIN_MS
        return MAX_MS

    def above(self, limit_ms: float) -> float:
        """How many answers took longer than `limit_ms`."""
        start = math.floor(limit_ms / BIN_MS) + 1
        return sum(self._bins[start:])

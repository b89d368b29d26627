"""Batch release: when an instance's waiting requests leave as a batch.

Pure functions that the gateway's `BatchQueue` and the simulator (`sim.engine`,
`sim.fluid`) both call.

- `release_at_s`: when a free worker should take the waiting batch. In "slo" dispatch (the
  default): when the smallest batch that sustains the recent arrival rate waits (`target`),
  or when the oldest request's deadline less the batch's tail service time comes, or sooner
  when the batch cannot fill by then (`policy.slo_dispatch_at`). A request without a
  deadline gets the fixed timeout's. The other modes (INFless's "deadline", "adaptive",
  "eager") use the fixed batch timeout (`policy.dispatch_at`). A closing queue flushes now.
- `next_target`: the smallest sustaining batch, re-derived every `TARGET_EVERY` arrivals
  from the arrival gap (`ExecModel.smallest_sustaining`).
- `wakes`: whether an arrival can change the waiting worker's decision (the first request
  starts a deadline; a batch of the target size or a full one ends the wait).

Pure: no I/O, no clock (times are arguments), no asyncio.
"""

from __future__ import annotations

import math
from typing import Protocol

from infless.dataplane.policy import BatchSettings, dispatch_at, slo_dispatch_at

TARGET_EVERY = 8  # arrivals between re-derivations of the smallest sustaining batch


class Sustaining(Protocol):
    """The service times release reads (`latency.ExecModel` is one)."""

    def tail_ms(self, batch_size: int) -> float: ...

    def smallest_sustaining(self, rate_rps: float, utilization: float) -> int: ...


def release_at_s(
    settings: BatchSettings,
    model: Sustaining | None,
    queue_length: int,
    head_arrival_s: float,
    head_deadline_s: float,
    interarrival_s: float,
    target: int,
    closed: bool = False,
) -> float:
    """When the waiting batch should leave (-inf: now; +inf: nothing waits)."""
    if queue_length <= 0:
        return math.inf
    if closed:
        return -math.inf  # draining: flush without waiting
    if model is not None and settings.mode == "slo":
        tail_s = model.tail_ms(min(queue_length, settings.batch_size)) / 1000.0
        deadline_s = head_deadline_s
        if math.isinf(deadline_s):  # no deadline given: the fixed timeout's
            deadline_s = head_arrival_s + settings.timeout_s + tail_s
        return slo_dispatch_at(
            queue_length, target, head_arrival_s, deadline_s - tail_s, interarrival_s
        )
    return dispatch_at(
        queue_length,
        settings.batch_size,
        head_arrival_s,
        settings.timeout_s,
        settings.mode,
        interarrival_s,
    )


def next_target(
    model: Sustaining, arrivals: int, interarrival_s: float, utilization: float, current: int
) -> int:
    """The target batch after the `arrivals`-th arrival: re-derived every `TARGET_EVERY`."""
    if arrivals % TARGET_EVERY:
        return current
    rate_rps = 1.0 / interarrival_s if interarrival_s > 0 else math.inf
    return model.smallest_sustaining(rate_rps, utilization)


def wakes(queue_length: int, target: int, batch_size: int) -> bool:
    """Whether a request that made the queue `queue_length` long can end the worker's wait."""
    return queue_length in (1, target, batch_size)

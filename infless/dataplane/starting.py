"""Admission counting an instance that is starting.

A starting instance (a replacement for a worker that died, or one the autoscaler added)
serves nothing yet, but it is not capacity lost. The function's recent starts measured how
long a start takes (`control.functions.StartHealth`), and an instance of the same shape
measured the service times (`ExecModel`). So a request that no ready instance can serve by
its deadline may wait for the starting one, instead of a 429. It does when that instance,
ready at its expected time, would serve the requests already waiting for it and then this
one's batch by the deadline.

What cannot be predicted is not counted: no start measured yet, no service times of that
shape, or a start already later than expected (its prediction failed).

Pure: no I/O, no clock (times are arguments), never imports torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from infless.dataplane.latency import ExecModel

START_WINDOW = 4  # recent starts of a function its next start is predicted from


@dataclass(frozen=True, slots=True)
class Expected:
    """What a starting instance is expected to be: ready at `ready_at_s`, serving batches
    of up to `batch_size` at the service times `model` measured on an instance like it."""

    ready_at_s: float
    model: ExecModel
    batch_size: int


def predicted_start_s(recent_starts_s: list[float]) -> float | None:
    """How long the function's next start takes: the longest of its recent starts (a start
    predicted at its tail); None while none was measured."""
    return max(recent_starts_s) if recent_starts_s else None


def finish_after_start_s(expected: Expected, now_s: float, ahead: int) -> float:
    """When a request that waits now for the starting instance `expected`, behind `ahead`
    requests already waiting for it, would have its batch served: those go first in full
    batches at their mean service time, then its own batch at its tail (as a ready queue is
    predicted, `Instance.finish_by_s`). inf when the start is overdue."""
    if expected.ready_at_s < now_s:
        return math.inf
    model = expected.model
    b = max(1, expected.batch_size)
    full, own = divmod(max(0, ahead), b)
    return expected.ready_at_s + (full * model.mean_ms(b) + model.tail_ms(own + 1)) / 1000.0

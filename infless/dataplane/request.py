"""A request waiting for inference, and what it gets back.

Plain data shared by the batch queue, the dispatcher and the gateway routes. No behaviour
beyond resolving its future.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from infless.workers.protocol import Answer, RawRequest

Array = npt.NDArray[np.generic]
# One request's input: its tensors by name, or — for a function with a handler — its body
# as it came (the worker's handler turns it into tensors).
Sample = dict[str, Array] | RawRequest


@dataclass(frozen=True, slots=True)
class Outcome:
    """One request's answer and where its time went."""

    outputs: dict[str, Array]
    instance_id: str
    batch_size: int
    queue_ms: float
    exec_ms: float  # the forward pass, as the worker timed it
    cold_start_ms: float
    service_ms: float = 0.0  # the batch as the gateway saw it: dispatch to result
    answer: Answer | None = None  # a handler's answer (raw requests); `outputs` then {}


@dataclass(slots=True, eq=False)
class Pending:
    """One sample on its way through a function's queues; `attempts` counts worker failures.

    `deadline_s` is when its batch must have finished for the answer to make the SLO
    (arrival + the SLO less the time spent outside queue and batch); inf: none given.
    """

    inputs: Sample
    arrival_s: float
    future: asyncio.Future[Outcome]
    attempts: int = 0
    cold_start_ms: float = 0.0
    deadline_s: float = math.inf

    def fail(self, error: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(error)

    def resolve(self, outcome: Outcome) -> None:
        if not self.future.done():
            self.future.set_result(outcome)

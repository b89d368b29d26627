"""A request waiting for inference, and what it gets back. Plain data shared by the batching
queue, the dispatcher and the gateway routes; no behaviour beyond resolving its future."""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[np.generic]


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


@dataclass(slots=True, eq=False)
class Pending:
    """One sample on its way through a function's queues; `attempts` counts worker failures.

    `deadline_s` is when its batch must have finished for the answer to make the SLO
    (arrival + the SLO less the time spent outside queue and batch); inf: none given.
    """

    inputs: dict[str, Array]
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

"""FunctionActivity: what the request path tells the control plane, at a few counters' cost.

The front door calls `arrive` and `finish` on every request. They count requests and those
outstanding, note when the function became idle, and keep the arrival times that ended an
idle period (the cold-start policy's idle times). Counters only grow: readers (the prewarm
manager, through the scaling port's snapshot) take what is new since they last looked,
without resetting anything here.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

MAX_IDLE_ARRIVALS = 1024


@dataclass(slots=True)
class FunctionActivity:
    invocations: int = 0  # requests that reached the function (any outcome)
    outstanding: int = 0
    idle_since_s: float | None = None  # last finish, or deployment before any request
    last_finish_s: float | None = None  # last finish of a request: None until one ran
    idle_arrivals: deque[float] = field(default_factory=lambda: deque(maxlen=MAX_IDLE_ARRIVALS))
    idle_arrival_count: int = 0  # every idle-ending arrival ever (the deque keeps the last)

    def arrive(self, now_s: float) -> None:
        if self.outstanding == 0:
            self.idle_arrivals.append(now_s)
            self.idle_arrival_count += 1
        self.outstanding += 1

    def finish(self, now_s: float) -> None:
        self.outstanding -= 1
        if self.outstanding <= 0:
            self.outstanding = 0
            self.idle_since_s = now_s
            self.last_finish_s = now_s

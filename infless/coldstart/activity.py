"""FunctionActivity: what the request path tells the prewarm manager, at two counters' cost.

`arrive` and `finish` run on every request; they only count outstanding requests, note
when the function became idle, and keep the arrival times that ended an idle period. The
manager turns those into policy observations off the request path.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

MAX_PENDING_ARRIVALS = 1024


@dataclass(slots=True)
class FunctionActivity:
    outstanding: int = 0
    idle_since_s: float | None = None  # last finish, or deployment before any request
    last_finish_s: float | None = None  # last finish of a request: None until one ran
    idle_arrivals: deque[float] = field(default_factory=lambda: deque(maxlen=MAX_PENDING_ARRIVALS))

    def arrive(self, now_s: float) -> None:
        if self.outstanding == 0:
            self.idle_arrivals.append(now_s)
        self.outstanding += 1

    def finish(self, now_s: float) -> None:
        self.outstanding -= 1
        if self.outstanding <= 0:
            self.outstanding = 0
            self.idle_since_s = now_s
            self.last_finish_s = now_s

    def drain_arrivals(self) -> list[float]:
        arrivals = list(self.idle_arrivals)
        self.idle_arrivals.clear()
        return arrivals

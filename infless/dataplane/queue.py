"""BatchQueue: one instance's bounded queue, releasing a batch when it is due.

When a batch leaves is `release.release_at_s` (pure, shared with the simulator):

- in "slo" dispatch (the default) every request carries its deadline. A batch leaves when
  the smallest batch that sustains the recent arrival rate waits (`release.next_target`),
  or when the oldest request's deadline minus the batch's tail service time comes, or
  sooner when the batch cannot fill by then. Service times come from the instance's
  `ExecModel`.
- the other modes (INFless's "deadline", "adaptive", "eager") use the fixed batch timeout.

A batch takes what waits, up to b. Only the instance's runner calls `next_batch`, and only
when its worker is free, so at most one batch is in flight per instance. Time comes from
the injected Clock.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque

from infless.clock import Clock
from infless.dataplane.latency import ExecModel
from infless.dataplane.policy import BatchSettings, update_interarrival
from infless.dataplane.release import next_target, release_at_s, wakes
from infless.dataplane.request import Pending

_TIMER_RESOLUTION_S = 1e-6  # a wake-up this close to its time counts as on time


def _settle(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class QueueFull(Exception):
    """The instance's queue is at capacity; the request should go elsewhere or get 429."""


class QueueClosed(Exception):
    """The instance is stopping or dead; its queue accepts nothing more."""


class BatchQueue:
    def __init__(
        self, clock: Clock, settings: BatchSettings, model: ExecModel | None = None
    ) -> None:
        if settings.mode == "slo" and model is None:
            raise ValueError('"slo" dispatch needs the instance\'s ExecModel')
        self._clock = clock
        self._settings = settings
        self._model = model
        self._items: deque[Pending] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._closed = False
        self._last_arrival_s = math.nan
        self._arrivals = 0
        self.interarrival_s = math.inf  # EWMA of the gaps between arrivals here
        self.target = settings.batch_size if model is None else 1  # "slo": when to go

    @property
    def settings(self) -> BatchSettings:
        return self._settings

    def update(self, settings: BatchSettings) -> None:
        self._settings = settings
        self._wake()

    def __len__(self) -> int:
        return len(self._items)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def has_room(self) -> bool:
        return not self._closed and len(self._items) < self._settings.capacity

    def submit(self, pending: Pending, *, force: bool = False) -> asyncio.Future[object]:
        """Queue a request; `force` admits it beyond capacity (a retry already accepted)."""
        if self._closed:
            raise QueueClosed("instance is not accepting requests")
        if not force and len(self._items) >= self._settings.capacity:
            raise QueueFull(f"queue holds {len(self._items)} requests (capacity reached)")
        now = self._clock.now()
        if not math.isnan(self._last_arrival_s):
            self.interarrival_s = update_interarrival(
                self.interarrival_s, now - self._last_arrival_s
            )
        self._last_arrival_s = now
        self._items.append(pending)
        self._arrivals += 1
        if self._model is not None:
            self.target = next_target(
                self._model,
                self._arrivals,
                self.interarrival_s,
                self._settings.utilization,
                self.target,
            )
        # Wake the runner only when its decision can change.
        if wakes(len(self._items), self.target, self._settings.batch_size):
            self._wake()
        return pending.future  # type: ignore[return-value]

    def _wake(self) -> None:
        if self._waiter is not None:
            _settle(self._waiter)

    async def next_batch(self) -> list[Pending]:
        """Wait for the next batch; raises QueueClosed once closed and empty."""
        while True:
            settings = self._settings
            items = self._items
            if items:
                head = items[0]
                due_s = release_at_s(
                    settings,
                    self._model,
                    len(items),
                    head.arrival_s,
                    head.deadline_s,
                    self.interarrival_s,
                    self.target,
                    self._closed,
                )
                if self._clock.now() >= due_s - _TIMER_RESOLUTION_S:
                    count = min(len(items), settings.batch_size)
                    return [items.popleft() for _ in range(count)]
                await self._wait(due_s)
            elif self._closed:
                raise QueueClosed("queue closed")
            else:
                await self._wait(None)

    async def _wait(self, deadline: float | None) -> None:
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiter = waiter
        timer: asyncio.Task[None] | None = None
        if deadline is not None:
            timer = asyncio.ensure_future(self._clock.sleep_until(deadline))
            timer.add_done_callback(lambda _: _settle(waiter))
        try:
            await waiter
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()

    def take_all(self) -> list[Pending]:
        """Remove and return every waiting request (to re-route them elsewhere)."""
        items = list(self._items)
        self._items.clear()
        return items

    def close(self) -> None:
        """Accept nothing more; `next_batch` flushes what remains, then raises QueueClosed."""
        self._closed = True
        self._wake()

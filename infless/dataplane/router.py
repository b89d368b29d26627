"""FunctionRouter: everything between an accepted request of one function and an instance queue.

Routes each request through the rate-share dispatcher; holds requests in a bounded waiting
room while the function has no ready instance (a cold start, which it asks the pool to
begin); retries requests orphaned by a dead worker once, then answers 503. Overload (every
ready instance's queue full) is a 429 with Retry-After. Gateway side: no torch, no I/O.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable

from infless.clock import Clock
from infless.dataplane.dispatcher import RateShareDispatcher
from infless.dataplane.instance import Instance, InstanceState
from infless.dataplane.queue import QueueClosed, QueueFull
from infless.dataplane.request import Array, Pending
from infless.errors import Overloaded, WorkerUnavailable

MAX_ATTEMPTS = 2  # the first try and one retry after a worker died


class FunctionRouter:
    def __init__(
        self,
        name: str,
        clock: Clock,
        waiting_capacity: int,
        request_cold_start: Callable[[str], None],
    ) -> None:
        self.name = name
        self.instances: list[Instance] = []
        self._clock = clock
        self._dispatcher = RateShareDispatcher()
        self._waiting: deque[Pending] = deque()
        self._waiting_capacity = waiting_capacity
        self._request_cold_start = request_cold_start
        self.cold_starts = 0
        self.retries = 0
        self.arrivals = 0  # samples submitted ever, admitted or not: the demand (only grows)

    # -- the request path ---------------------------------------------------------------
    def submit(self, inputs: dict[str, Array]) -> Pending:
        future = asyncio.get_running_loop().create_future()
        pending = Pending(inputs=inputs, arrival_s=self._clock.now(), future=future)
        self.arrivals += 1
        self._route(pending)
        return pending

    def _route(self, pending: Pending) -> None:
        instance = self._dispatcher.choose(self.instances)
        if instance is not None:
            assert instance.queue is not None
            try:
                instance.queue.submit(pending)
            except (QueueFull, QueueClosed):
                pass
            else:
                return
        if any(i.state is InstanceState.READY for i in self.instances):
            raise Overloaded(
                f"function {self.name!r} is at capacity: every instance queue is full",
                retry_after_s=1.0,
            )
        self._wait_for_instance(pending)

    def _wait_for_instance(self, pending: Pending, *, admitted: bool = False) -> None:
        if not admitted and len(self._waiting) >= self._waiting_capacity:
            raise Overloaded(
                f"function {self.name!r} is starting and {len(self._waiting)} requests "
                "already wait for it",
                retry_after_s=2.0,
            )
        if pending.cold_start_ms == 0.0:
            pending.cold_start_ms = -1.0  # marked: filled in when an instance takes it
        if not self._waiting:
            self.cold_starts += 1
        self._waiting.append(pending)
        if not any(i.state is InstanceState.STARTING for i in self.instances):
            self._request_cold_start(self.name)

    def forget_waiting(self, pending: Pending) -> None:
        """A waiting request gave up (timeout, client gone)."""
        with contextlib.suppress(ValueError):
            self._waiting.remove(pending)

    # -- instance lifecycle ------------------------------------------------------------
    def add(self, instance: Instance) -> None:
        self.instances.append(instance)

    def instance_ready(self, instance: Instance) -> None:
        """Move every waiting request (all already admitted) into the ready queues."""
        now = self._clock.now()
        while self._waiting and self.ready_count:
            pending = self._waiting.popleft()
            if pending.cold_start_ms < 0:
                pending.cold_start_ms = (now - pending.arrival_s) * 1000.0
            self._reroute(pending)

    def remove(self, instance: Instance) -> None:
        if instance in self.instances:
            self.instances.remove(instance)
        self._dispatcher.forget(instance.instance_id)

    def start_failed(self, error: str) -> None:
        """No instance could start: every waiting request gets a 503 now, not a timeout."""
        if any(i.state in (InstanceState.READY, InstanceState.STARTING) for i in self.instances):
            return
        failure = WorkerUnavailable(
            f"function {self.name!r} could not start an instance: {error}", retry_after_s=5.0
        )
        while self._waiting:
            self._waiting.popleft().fail(failure)

    def adopt_orphans(self, orphans: list[Pending]) -> None:
        """Requests whose worker died: retry each once on another instance, else 503."""
        for pending in orphans:
            pending.attempts += 1
            if pending.attempts >= MAX_ATTEMPTS:
                pending.fail(
                    WorkerUnavailable(
                        f"function {self.name!r}: the worker died twice while serving this request",
                        retry_after_s=1.0,
                    )
                )
                continue
            self.retries += 1
            self._reroute(pending)

    def _reroute(self, pending: Pending) -> None:
        """An already accepted request goes to the shortest ready queue, even beyond its
        capacity (it was admitted once; dropping it now would lose it), else waits."""
        ready = [
            i
            for i in self.instances
            if i.state is InstanceState.READY and i.queue is not None and not i.queue.closed
        ]
        if ready:
            target = min(ready, key=lambda i: i.queue_length)
            assert target.queue is not None
            target.queue.submit(pending, force=True)
        else:
            self._wait_for_instance(pending, admitted=True)

    def fail_all(self, error: Exception) -> None:
        while self._waiting:
            self._waiting.popleft().fail(error)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def ready_count(self) -> int:
        return sum(1 for i in self.instances if i.state is InstanceState.READY)

"""FunctionRouter: everything between an accepted request of one function and an instance queue.

Admission is by deadline. A request carries the time by which its batch must be served:
its arrival plus a budget (`dataplane.frontdoor`). The rate-share dispatcher proposes an
instance, and `admission.candidates` (pure, shared with the simulator) says which
instances it may join, in order:

1. the proposed one, when its predicted finish meets the deadline (or it is idle);
2. else the one that would finish it first, if that one does;
3. else it waits for an instance that is starting (a dead worker's replacement, a scale
   out), if that one, ready when the function's measured starts say, would serve it by its
   deadline (`dataplane.starting`);
4. else it is refused at once (429), with a Retry-After from the predicted drain. Work
   that cannot finish in time is never queued.

While the function has no ready instance (a cold start), requests wait in a bounded
waiting room and the router posts `WakeRequested`: the control loop starts one. Requests
orphaned by a dead worker are retried once, then answered 503.
Gateway side: no torch, no I/O.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections import deque

from infless.clock import Clock
from infless.dataplane import admission
from infless.dataplane.dispatcher import RateShareDispatcher
from infless.dataplane.events import WakeRequested, WakeSink
from infless.dataplane.instance import Instance, InstanceState
from infless.dataplane.latency import ExecModel
from infless.dataplane.queue import QueueClosed, QueueFull
from infless.dataplane.request import Pending, Sample
from infless.dataplane.starting import Expected, finish_after_start_s
from infless.errors import Overloaded, WorkerUnavailable

MAX_ATTEMPTS = 2  # the first try and one retry after a worker died
KEPT_MODELS = 16  # service times of removed instances kept for their replacements


class FunctionRouter:
    def __init__(
        self,
        name: str,
        clock: Clock,
        waiting_capacity: int,
        events: WakeSink,
    ) -> None:
        self.name = name
        self.instances: list[Instance] = []
        self._clock = clock
        self._dispatcher = RateShareDispatcher()
        self._waiting: deque[Pending] = deque()
        self._waiting_capacity = waiting_capacity
        self._events = events
        self.cold_starts = 0
        self.retries = 0
        self.arrivals = 0  # samples submitted ever, admitted or not: the demand (only grows)
        self.rejected = 0  # samples refused for lack of capacity (429), ever
        self.start_error: str | None = None  # the last start failed (cleared by a ready one)
        self._models: dict[str, ExecModel] = {}  # by instance id: removed ones' service times

    # -- the request path ---------------------------------------------------------------
    def submit(self, inputs: Sample, budget_s: float = math.inf) -> Pending:
        """Admit one sample whose batch must be served within `budget_s`, or raise
        Overloaded (429) when no instance can; inf: admit wherever there is room."""
        future = asyncio.get_running_loop().create_future()
        now = self._clock.now()
        pending = Pending(inputs, now, future, deadline_s=now + budget_s)
        self.arrivals += 1
        self._route(pending, now)
        return pending

    def capacity(self, slo_ms: float) -> list[tuple[Instance, float]]:
        """What each ready instance serves at most, now, in requests per second: the best
        batch size it may run whose service time at its tail still fits the SLO (INFless's
        feasibility: the SLO for one request, half of it for a batch), at the mean service
        time it measured recently — so a slower host shows a proportionally lower capacity."""
        return [
            (instance, instance.model.capacity_rps(slo_ms))
            for instance in self.instances
            if instance.state is InstanceState.READY and instance.model is not None
        ]

    def has_room(self, budget_s: float) -> bool:
        """Whether a ready instance would serve a request admitted now within `budget_s`,
        by its prediction — an idle one too: its tail at batch 1 must fit (admission takes
        a request on an idle instance whatever it predicts; a caller choosing between
        functions wants the one that makes it). Counts nothing. False with no ready
        instance (a cold start)."""
        now = self._clock.now()
        ready = [i for i in self.instances if i.state is InstanceState.READY]
        return admission.has_room(ready, now, now + budget_s)

    def check_room(self, budget_s: float) -> None:
        """Refuse (Overloaded, 429) a request that no ready instance could serve within
        `budget_s` even if it were the only one left — before its body is decoded, so that
        an overload costs as little as it can. With no ready instance it may wait (cold), and
        so it may when an instance that is starting would serve it in time."""
        now = self._clock.now()
        ready = [i for i in self.instances if i.state is InstanceState.READY]
        retry_after_s = admission.room_refusal_s(ready, now, budget_s)
        if retry_after_s is not None and self._after_start_s(now) <= now + budget_s:
            retry_after_s = None  # an instance that is starting would serve it in time
        if retry_after_s is not None:
            self.arrivals += 1
            self.rejected += 1
            raise Overloaded(
                f"function {self.name!r} is at capacity: no instance can answer within its "
                "latency target",
                retry_after_s=retry_after_s,
            )

    def _route(self, pending: Pending, now: float) -> None:
        deadline_s = pending.deadline_s
        chosen = self._dispatcher.choose(self.instances)
        for instance in admission.candidates(chosen, self.instances, now, deadline_s):
            if _admit(instance, pending):
                return
        ready = [i for i in self.instances if i.state is InstanceState.READY]
        if ready:
            after_start_s = self._after_start_s(now)
            if after_start_s <= deadline_s and after_start_s < math.inf:  # served in time
                self._wait_for_instance(pending)
                return
            self.rejected += 1
            retry_after_s = admission.refusal_retry_s(ready, now, deadline_s)
            raise Overloaded(
                f"function {self.name!r} is at capacity: no instance can answer within its "
                "latency target",
                retry_after_s=min(retry_after_s, max(1.0, after_start_s - deadline_s)),
            )
        self._wait_for_instance(pending)

    def _after_start_s(self, now: float) -> float:
        """When a request waiting now would be served by the first instance that is
        starting with a known expected start (all waiting requests ahead of it); inf: none."""
        first: Expected | None = None
        for instance in self.instances:
            ready_at_s, model = instance.expected_ready_s, instance.expected_model
            if instance.state is not InstanceState.STARTING or ready_at_s is None:
                continue
            if model is not None and (first is None or ready_at_s < first.ready_at_s):
                first = Expected(ready_at_s, model, instance.config.batch_size)
        if first is None:
            return math.inf
        return finish_after_start_s(first, now, len(self._waiting))

    def _wait_for_instance(self, pending: Pending, *, admitted: bool = False) -> None:
        if not admitted and len(self._waiting) >= self._waiting_capacity:
            self.rejected += 1
            raise Overloaded(
                f"function {self.name!r} is starting and {len(self._waiting)} requests "
                "already wait for it",
                retry_after_s=2.0,
            )
        starting = any(i.state is InstanceState.STARTING for i in self.instances)
        if self.start_error is not None and not starting and not admitted:
            self._events.post(WakeRequested(self.name))  # tried again after its backoff
            raise WorkerUnavailable(
                f"function {self.name!r} could not start an instance: {self.start_error}",
                retry_after_s=5.0,
            )
        if pending.cold_start_ms == 0.0:
            pending.cold_start_ms = -1.0  # marked: filled in when an instance takes it
        if not self._waiting:
            self.cold_starts += 1
        self._waiting.append(pending)
        if not starting:
            self._events.post(WakeRequested(self.name))

    def forget_waiting(self, pending: Pending) -> None:
        """A waiting request gave up (timeout, client gone)."""
        with contextlib.suppress(ValueError):
            self._waiting.remove(pending)

    # -- instance lifecycle ------------------------------------------------------------
    def add(self, instance: Instance) -> None:
        """A new (starting) instance: it expects the service times its predecessor (a
        removed instance of the same id) measured, else those of a ready one of its shape."""
        self.instances.append(instance)
        model = self._models.pop(instance.instance_id, None)
        if model is None:
            model = next(
                (
                    i.model
                    for i in self.instances
                    if i.state is InstanceState.READY
                    and i.config.cpus == instance.config.cpus
                    and i.config.gpu_pct == instance.config.gpu_pct
                ),
                None,
            )
        instance.expected_model = model

    def instance_ready(self, instance: Instance) -> None:
        """Move every waiting request (all already admitted) into the ready queues."""
        self.start_error = None
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
        if instance.model is not None:  # its replacement (same id) starts from these
            self._models.pop(instance.instance_id, None)
            self._models[instance.instance_id] = instance.model
            while len(self._models) > KEPT_MODELS:
                del self._models[next(iter(self._models))]
        self._release_waiting()

    def _release_waiting(self) -> None:
        """Requests that waited for a start that will not come (it failed or was cancelled)
        go to the ready instances, if any (they were admitted: never dropped)."""
        if not self._waiting or any(i.state is InstanceState.STARTING for i in self.instances):
            return
        if self.ready_count:
            waiting, self._waiting = list(self._waiting), deque()
            for pending in waiting:
                self._reroute(pending)

    def start_failed(self, error: str) -> None:
        """No instance could start: every waiting request gets a 503 now, not a timeout,
        and so does every new one until an instance is starting or ready again."""
        self.start_error = error
        self._release_waiting()
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


def _admit(instance: Instance, pending: Pending) -> bool:
    """Queue `pending` on `instance`; False when its queue is full or closing."""
    queue = instance.queue
    if queue is None:
        return False
    try:
        queue.submit(pending)
    except (QueueFull, QueueClosed):
        return False
    return True

"""The send loops: an open-loop schedule, or closed-loop clients, on the engine's pool.

I/O shell over `engine.ConnectionPool`. The open loop times its sends with one chain of loop
timers (each wake-up sends every arrival due within `SEND_BATCH_S`, then sleeps until the
next); the closed loop has no timer at all: each answer sends its client's next request. No
task per request and no encoding here: requests are pre-built bytes, cycled per function.
Each answer becomes one `RequestRecord` (times relative to the run's start, from
`time.perf_counter`). Decides nothing about workloads: the schedule or plan says what to send.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial

from loadgen.engine import ConnectionPool
from loadgen.records import NAN, RequestRecord
from loadgen.responses import error_code, timing_from_headers
from loadgen.workloads import ClosedLoopPlan, Schedule

SEND_BATCH_S = 0.0005  # arrivals due within this much of now go out in the same wake-up

# The client's clock: uvloop's loop.time() ticks in whole milliseconds, too coarse for latencies.
_now = time.perf_counter


@dataclass(slots=True)
class LiveCounters:
    sent: int = 0
    done: int = 0
    ok: int = 0
    errors: int = 0


class _Driver:
    """What both loops share: picking the next body, submitting, recording, finishing."""

    def __init__(
        self,
        pool: ConnectionPool,
        wires: Mapping[str, Sequence[bytes]],
        t0: float,
        counters: LiveCounters,
    ) -> None:
        self._pool = pool
        self._wires = wires
        self._t0 = t0
        self._counters = counters
        self._next_body = dict.fromkeys(wires, 0)
        self._outstanding = 0
        self._sending = True
        self.records: list[RequestRecord] = []
        self.finished: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def _submit(self, index: int, function: str, scheduled_s: float | None, client: int) -> None:
        bodies = self._wires[function]
        turn = self._next_body[function]
        self._next_body[function] = turn + 1
        sent_t = _now()
        self._outstanding += 1
        self._counters.sent += 1
        self._pool.submit(
            bodies[turn % len(bodies)],
            partial(self._done, index, function, scheduled_s, sent_t, client),
        )

    def _done(
        self,
        index: int,
        function: str,
        scheduled_s: float | None,
        sent_t: float,
        client: int,
        status: int,
        headers: dict[str, str],
        body: bytes,
        error: str,
        done_t: float,
    ) -> None:
        self._outstanding -= 1
        sent_s = sent_t - self._t0
        counters = self._counters
        counters.done += 1
        if status:
            latency_ms = (done_t - sent_t) * 1000.0
            if status == 200:
                counters.ok += 1
            else:
                counters.errors += 1
                error = error_code(status, body, headers.get("Content-Type", ""))
            record = RequestRecord(
                index=index,
                function=function,
                scheduled_s=sent_s if scheduled_s is None else scheduled_s,
                sent_s=sent_s,
                latency_ms=latency_ms,
                status=status,
                error=error,
                **timing_from_headers(headers),
            )
        else:
            counters.errors += 1
            record = RequestRecord(
                index=index,
                function=function,
                scheduled_s=sent_s if scheduled_s is None else scheduled_s,
                sent_s=sent_s,
                latency_ms=NAN,
                status=0,
                error=error,
            )
        self.records.append(record)
        self._answered(client)
        self._check_finished()

    def _answered(self, client: int) -> None:
        """A client's answer arrived (the closed loop sends its next request here)."""

    def _stop_sending(self) -> None:
        self._sending = False
        self._check_finished()

    def _check_finished(self) -> None:
        if not self._sending and self._outstanding == 0 and not self.finished.done():
            self.finished.set_result(None)


class OpenLoopDriver(_Driver):
    """Sends each arrival of the schedule at its time, whatever the answers."""

    def __init__(
        self,
        pool: ConnectionPool,
        wires: Mapping[str, Sequence[bytes]],
        t0: float,
        counters: LiveCounters,
        schedule: Schedule,
        max_duration_s: float,
    ) -> None:
        super().__init__(pool, wires, t0, counters)
        self._times = [a.at_s for a in schedule.arrivals]
        self._functions = [a.function for a in schedule.arrivals]
        self._max_duration_s = max_duration_s
        self._next = 0
        self._timer: asyncio.TimerHandle | None = None
        self.not_sent = 0  # scheduled but not sent: the duration cap ran out

    def start(self) -> None:
        self._dispatch()

    def stop(self) -> None:
        """Send nothing more (an interrupted run); what was sent still reports."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._sending:
            self.not_sent = len(self._times) - self._next
            self._stop_sending()

    def _dispatch(self) -> None:
        self._timer = None
        times, count, t0 = self._times, len(self._times), self._t0
        while self._next < count:
            at_s = times[self._next]
            now_s = _now() - t0
            if at_s > now_s + SEND_BATCH_S:
                self._timer = asyncio.get_running_loop().call_later(at_s - now_s, self._dispatch)
                return
            if at_s >= self._max_duration_s or now_s >= self._max_duration_s:
                break  # beyond the cap, or fallen that far behind
            self._submit(self._next, self._functions[self._next], at_s, 0)
            self._next += 1
        self.stop()


class ClosedLoopDriver(_Driver):
    """`plan.clients` clients, each sending its next request when its answer arrives."""

    def __init__(
        self,
        pool: ConnectionPool,
        wires: Mapping[str, Sequence[bytes]],
        t0: float,
        counters: LiveCounters,
        plan: ClosedLoopPlan,
    ) -> None:
        super().__init__(pool, wires, t0, counters)
        self._plan = plan
        self._active = len(plan.clients)
        self._sent = 0

    def start(self) -> None:
        for client in range(len(self._plan.clients)):
            self._answered(client)
        self._check_finished()

    def stop(self) -> None:
        self._active = 0
        if self._sending:
            self._stop_sending()

    def _answered(self, client: int) -> None:
        if not self._sending:
            return
        if self._plan.may_send(_now() - self._t0, self._sent):
            index = self._sent
            self._sent += 1
            self._submit(index, self._plan.clients[client], None, client)
            return
        self._active -= 1
        if self._active <= 0:
            self._sending = False

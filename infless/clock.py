"""The Clock protocol, the real clock, the Ticker that runs control loops on a clock, and the
few direct readings of time that measurements need.

Nothing else in infless reads time (ruff's banned-API rule holds every other module to
that). Decisions take a `Clock` (a fake one in tests): `now()` is monotonic seconds;
`wall()` is Unix seconds for timestamps shown to people. Measurements of code that runs
(a forward pass, a profiled operator, a build) use `perf_s` and `thread_cpu_s`; `wall_s` and
`wall_ns` stamp records; `pause_s` blocks a thread that is not the event loop's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Protocol

log = logging.getLogger(__name__)


def perf_s() -> float:
    """A high-resolution monotonic reading, for timing code (differences only)."""
    return time.perf_counter()


def thread_cpu_s() -> float:
    """CPU seconds the calling thread has used (differences only)."""
    return time.thread_time()


def wall_s() -> float:
    """Unix seconds now, for records shown to people or stored."""
    return time.time()


def wall_ns() -> int:
    """Unix nanoseconds now (OpenFaaS's X-Start-Time)."""
    return time.time_ns()


def pause_s(seconds: float) -> None:
    """Block the calling thread; never call it on the event loop."""
    time.sleep(seconds)


class Clock(Protocol):
    def now(self) -> float: ...

    def wall(self) -> float: ...

    async def sleep_until(self, deadline: float) -> None: ...


class RealClock:
    """Monotonic time from the OS; sleeps on the running event loop."""

    def now(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()

    async def sleep_until(self, deadline: float) -> None:
        delay = deadline - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)


class Ticker:
    """Calls `tick()` every `interval_s` on a Clock, from `start()` until `stop()`.

    The control loops (autoscaler, prewarm manager, reclaimer) all run this way: their
    decisions are synchronous functions of a snapshot; a tick that raises is logged and the
    next one still runs.
    """

    def __init__(
        self, clock: Clock, interval_s: float, tick: Callable[[], object], name: str
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"{name}: the interval must be > 0 seconds, got {interval_s}")
        self._clock = clock
        self._interval_s = interval_s
        self._tick = tick
        self._name = name
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None or self._task.done():
            first_s = self._clock.now() + self._interval_s  # from now, not from when it runs
            loop = asyncio.get_running_loop()
            self._task = loop.create_task(self._run(first_s), name=self._name)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self, deadline_s: float) -> None:
        while True:
            await self._clock.sleep_until(deadline_s)
            try:
                self._tick()
            except Exception:  # one bad tick must not end the loop for good
                log.exception("%s: tick failed; the next one runs as usual", self._name)
            deadline_s = self._clock.now() + self._interval_s

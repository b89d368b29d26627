"""`LoopLagProbe`: measures how late the event loop runs a timer, into a `LoopLag`.

The front door takes the lag's tail off every request's budget (`dataplane.latency`).
It only measures; it decides nothing. Gateway side: never imports torch.
"""

from __future__ import annotations

import asyncio
import contextlib

from infless.clock import Clock
from infless.dataplane.latency import LoopLag


class LoopLagProbe:
    """Every `interval_s`, how late a timer fired, observed into `lag`."""

    def __init__(self, clock: Clock, lag: LoopLag, interval_s: float = 0.05) -> None:
        self._clock = clock
        self._lag = lag
        self._interval_s = interval_s
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="loop-lag")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        clock = self._clock
        while True:
            due_s = clock.now() + self._interval_s
            await clock.sleep_until(due_s)
            self._lag.observe((clock.now() - due_s) * 1000.0)

"""`EventQueue`: the one queue the pool's reconcile loop consumes, and its consumer task.

Anyone posts (`post` is a `put_nowait`: the request path never awaits it). One task takes
the events in order and hands each to the pool's handler, which is synchronous: work that
takes time (a start, a drain) runs as its own task and posts its completion back. A handler
that raises is logged and the loop goes on. `settled` waits until every event posted so far
has been handled (shutdown, and tests). It decides nothing itself.
Gateway side: never imports torch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

E = TypeVar("E")


class EventQueue(Generic[E]):
    """One queue, one consumer task, one synchronous handler."""

    def __init__(self, handle: Callable[[E], None], name: str = "reconcile") -> None:
        self._handle = handle
        self._name = name
        self._queue: asyncio.Queue[E] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    def post(self, event: E) -> None:
        """Queue `event` for the loop; starts the loop on first use."""
        self._queue.put_nowait(event)
        self._ensure_running()

    def _ensure_running(self) -> None:
        if self._task is None or self._task.done():
            with contextlib.suppress(RuntimeError):  # no running event loop: started later
                self._task = asyncio.get_running_loop().create_task(self._run(), name=self._name)

    async def settled(self) -> None:
        """Return once every event posted so far (and those they posted) is handled."""
        self._ensure_running()
        await self._queue.join()

    async def close(self) -> None:
        """Handle what is queued, then stop the consumer."""
        if self._task is None:
            return
        await self.settled()
        task, self._task = self._task, None
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def _run(self) -> None:
        queue = self._queue
        while True:
            event = await queue.get()
            try:
                self._handle(event)
            except Exception:  # one bad event must not stop the loop
                log.exception("%s loop: handling %r failed", self._name, event)
            finally:
                queue.task_done()

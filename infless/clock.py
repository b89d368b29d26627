"""The Clock protocol and the real clock: nothing else in infless reads time directly.

`now()` is monotonic seconds; `wall()` is Unix seconds for timestamps shown to people.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


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

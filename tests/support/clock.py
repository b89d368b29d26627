"""A fake Clock for tests: time moves only when the test advances it, waking due sleepers;
the wall clock may also jump on its own."""

from __future__ import annotations

import asyncio


class FakeClock:
    def __init__(self, start: float = 1000.0, wall_offset: float = 1_700_000_000.0) -> None:
        self._now = start
        self._wall_offset = wall_offset
        self._sleepers: list[tuple[float, asyncio.Future[None]]] = []

    def now(self) -> float:
        return self._now

    def wall(self) -> float:
        return self._now + self._wall_offset

    def jump_wall(self, seconds: float) -> None:
        """Step the wall clock (an NTP step, `date -s`); monotonic time does not move."""
        self._wall_offset += seconds

    async def sleep_until(self, deadline: float) -> None:
        if deadline <= self._now:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._sleepers.append((deadline, future))
        await future

    @property
    def sleeper_count(self) -> int:
        return sum(1 for _, f in self._sleepers if not f.done())

    async def advance(self, seconds: float) -> None:
        """Move time forward and let every task woken by it run until it blocks again."""
        self._now += seconds
        due = [(d, f) for d, f in self._sleepers if d <= self._now]
        self._sleepers = [(d, f) for d, f in self._sleepers if d > self._now]
        for _, future in sorted(due, key=lambda item: item[0]):
            if not future.done():
                future.set_result(None)
        for _ in range(10):
            await asyncio.sleep(0)

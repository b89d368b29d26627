"""The live board's one producer and its viewers: every interval one snapshot is read,
encoded once as a server-sent event, and offered to every open page.

A page (`Viewer`) holds at most one frame it has not written yet: a newer one replaces it
(the page skips a snapshot, each is the whole state), and a page that skipped
`max_skipped` in a row is dropped (its stream closed), so a stalled page holds one frame
and never slows the others. The snapshot and the history a page gets when it opens are
each built at most once per interval, however many pages ask: nothing is done per viewer
but handing it the shared bytes. The series are sampled every interval, viewers or not, so
a page opened later still shows the last minutes. Gateway side: never imports torch; the
tick is synchronous and short (it reads counters and the control plane's read-only views,
it never waits).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

import orjson

from infless.clock import Clock, Ticker
from infless.gateway.board.series import FIELDS, Point, Reading, Series

Read = Callable[[float], Mapping[str, Reading]]  # monotonic now -> each function's reading
State = Callable[[], dict[str, object]]  # servers, instances, functions, models


def sse(event: str, data: object, event_id: int | None = None) -> bytes:
    """One server-sent event (orjson writes no newline: one `data:` line)."""
    head = f"event: {event}\n" + ("" if event_id is None else f"id: {event_id}\n")
    return head.encode() + b"data: " + orjson.dumps(data) + b"\n\n"


class Viewer:
    """One open page: the newest frame it has not written yet, older ones skipped."""

    def __init__(self, max_skipped: int, on_drop: Callable[[], None] = lambda: None) -> None:
        self._max_skipped = max_skipped
        self._on_drop = on_drop
        self._frame: bytes | None = None
        self._ready = asyncio.Event()
        self.skipped = 0  # frames replaced in a row before the page took one
        self.closed = False

    def offer(self, frame: bytes) -> bool:
        """Hand it the newest frame; False once it is closed (dropped: too far behind)."""
        if self.closed:
            return False
        if self._frame is not None:
            self.skipped += 1
            if self.skipped >= self._max_skipped:
                self.close()
                self._on_drop()
                return False
        self._frame = frame
        self._ready.set()
        return True

    async def next(self) -> bytes | None:
        """The frame to write next, once there is one; None once closed."""
        while self._frame is None and not self.closed:
            self._ready.clear()
            await self._ready.wait()
        if self.closed:
            return None
        frame, self._frame = self._frame, None
        self.skipped = 0
        return frame

    def close(self) -> None:
        self.closed = True
        self._ready.set()


class Hub:
    """Samples the series and fans the snapshot out, every `interval_s` on `clock`."""

    def __init__(
        self,
        clock: Clock,
        interval_s: float,
        history_s: float,
        read: Read,
        state: State,
        max_viewers: int,
        max_skipped: int,
    ) -> None:
        self._clock = clock
        self._read = read
        self._state = state
        self.interval_s = interval_s
        self.max_viewers = max_viewers
        self._max_skipped = max_skipped
        self.history_points = max(1, round(history_s / interval_s))
        self.series = Series(self.history_points)
        self.viewers: set[Viewer] = set()
        self.ticks = 0
        self.snapshots_built = 0  # snapshots encoded, ever (one per interval at most)
        self.dropped = 0  # pages dropped for falling behind, ever
        self._points: dict[str, Point] = {}
        self._frame: tuple[int, bytes] | None = None
        self._history: tuple[int, bytes] | None = None
        self._ticker = Ticker(clock, interval_s, self.tick, "live-board")

    def start(self) -> None:
        self.tick()  # the first point now, so a page opened at once has something
        self._ticker.start()

    async def stop(self) -> None:
        await self._ticker.stop()
        self.close()

    def join(self, on_drop: Callable[[], None] = lambda: None) -> Viewer | None:
        """A new page's viewer, None when `max_viewers` pages are open."""
        if len(self.viewers) >= self.max_viewers:
            return None
        viewer = Viewer(self._max_skipped, on_drop)
        self.viewers.add(viewer)
        return viewer

    def leave(self, viewer: Viewer) -> None:
        viewer.close()
        self.viewers.discard(viewer)

    def tick(self) -> None:
        """One interval: a point per function; with pages open, one snapshot for all."""
        self.ticks += 1
        now_s = self._clock.now()
        self._points = self.series.sample(now_s, self._clock.wall(), self._read(now_s))
        if not self.viewers:
            return
        frame = self.frame()
        for viewer in list(self.viewers):
            if not viewer.offer(frame):
                self.viewers.discard(viewer)
                self.dropped += 1

    def frame(self) -> bytes:
        """This interval's snapshot as an event (built once per interval)."""
        if self._frame is None or self._frame[0] != self.ticks:
            snapshot = {
                **self._state(),
                "t": round(self._clock.wall(), 3),
                "intervalS": self.interval_s,
                "historyPoints": self.history_points,
                "fields": FIELDS,
                "points": self._points,
            }
            self._frame = (self.ticks, sse("snapshot", snapshot, self.ticks))
            self.snapshots_built += 1
        return self._frame[1]

    def history(self) -> bytes:
        """Every function's points so far as an event (built once per interval)."""
        if self._history is None or self._history[0] != self.ticks:
            data = {"fields": FIELDS, "series": self.series.history()}
            self._history = (self.ticks, sse("history", data))
        return self._history[1]

    def close(self) -> None:
        """End every page's stream (the gateway stops)."""
        for viewer in self.viewers:
            viewer.close()
        self.viewers.clear()

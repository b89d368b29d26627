"""The live board's producer: one snapshot per interval however many pages are open, the
same bytes to each, none built without pages, a stalled page skipping then dropped, a
bound on pages, and every stream ended when the gateway stops (fake clock, no sleeping)."""

from __future__ import annotations

import asyncio

import orjson

from infless.gateway.board.hub import Hub, Viewer, sse
from infless.gateway.board.series import Reading
from tests.support.clock import FakeClock

INTERVAL_S = 1.0


class Platform:
    """What the hub reads: counters that grow, and how often the state was read."""

    def __init__(self) -> None:
        self.offered = 0
        self.state_reads = 0

    def read(self, now_s: float) -> dict[str, Reading]:
        self.offered += 10
        return {"fn": Reading(self.offered, self.offered, 0, 0, 0, 0, 1)}

    def state(self) -> dict[str, object]:
        self.state_reads += 1
        return {"servers": [], "instances": [], "functions": [{"name": "fn"}]}


def _hub(platform: Platform, clock: FakeClock, max_viewers: int = 8) -> Hub:
    return Hub(clock, INTERVAL_S, 60.0, platform.read, platform.state, max_viewers, 3)


def _data(frame: bytes) -> dict[str, object]:
    event, _, rest = frame.partition(b"\n")
    assert event == b"event: snapshot"
    data_line = next(line for line in rest.split(b"\n") if line.startswith(b"data: "))
    result: dict[str, object] = orjson.loads(data_line[len(b"data: ") :])
    return result


async def test_one_snapshot_per_interval_is_shared_by_every_page() -> None:
    clock, platform = FakeClock(), Platform()
    hub = _hub(platform, clock)
    hub.start()
    viewers = [hub.join() for _ in range(3)]
    assert all(v is not None for v in viewers)
    for tick in range(1, 4):
        await clock.advance(INTERVAL_S)
        frames = [await v.next() for v in viewers if v is not None]
        assert frames[0] is not None
        assert all(f is frames[0] for f in frames)  # the very same bytes, built once
        assert hub.snapshots_built == tick
        assert platform.state_reads == tick
        snapshot = _data(frames[0])
        assert snapshot["functions"] == [{"name": "fn"}]
        points = snapshot["points"]
        assert isinstance(points, dict)
        assert points["fn"][1] == 10.0  # offeredRps: 10 more calls each second
    await hub.stop()


async def test_without_pages_the_series_grow_and_no_snapshot_is_built() -> None:
    clock, platform = FakeClock(), Platform()
    hub = _hub(platform, clock)
    hub.start()
    for _ in range(5):
        await clock.advance(INTERVAL_S)
    assert hub.ticks == 6  # the first at start, then one per interval
    assert hub.snapshots_built == 0
    assert platform.state_reads == 0
    assert len(hub.series.history()["fn"]["t"]) == 6
    viewer = hub.join()
    assert viewer is not None
    first = hub.frame()  # a page opening between ticks gets this interval's snapshot ...
    assert hub.frame() is first  # ... built once for every page that opens meanwhile
    assert hub.history() is hub.history()
    assert hub.snapshots_built == 1
    await hub.stop()


async def test_a_page_that_falls_behind_skips_snapshots_and_is_dropped() -> None:
    clock, platform = FakeClock(), Platform()
    hub = _hub(platform, clock)  # max_skipped = 3
    hub.start()
    dropped: list[bool] = []
    stalled = hub.join(on_drop=lambda: dropped.append(True))
    reading = hub.join()
    assert stalled is not None
    assert reading is not None
    for skipped in (0, 1, 2):  # the stalled page holds only the newest snapshot
        await clock.advance(INTERVAL_S)
        assert await reading.next() is not None
        assert stalled.skipped == skipped
        assert not stalled.closed
    await clock.advance(INTERVAL_S)
    assert stalled.closed
    assert dropped == [True]
    assert stalled not in hub.viewers
    assert hub.dropped == 1
    assert await stalled.next() is None
    assert await reading.next() is not None  # the other page never noticed
    await clock.advance(INTERVAL_S)
    assert await reading.next() is not None
    await hub.stop()


async def test_a_page_that_skipped_gets_the_newest_snapshot() -> None:
    viewer = Viewer(max_skipped=5)
    assert viewer.offer(b"one")
    assert viewer.offer(b"two")
    assert await viewer.next() == b"two"
    assert viewer.skipped == 0  # taking a frame resets the count


async def test_pages_are_bounded_and_every_stream_ends_when_the_gateway_stops() -> None:
    clock, platform = FakeClock(), Platform()
    hub = _hub(platform, clock, max_viewers=2)
    first, second = hub.join(), hub.join()
    assert first is not None
    assert second is not None
    assert hub.join() is None
    hub.leave(first)
    third = hub.join()
    assert third is not None
    waiting = asyncio.ensure_future(third.next())
    await asyncio.sleep(0)
    hub.close()
    assert await waiting is None
    assert await second.next() is None
    assert not hub.viewers


def test_an_event_is_one_data_line() -> None:
    frame = sse("snapshot", {"text": "two\nlines"}, 7)
    assert frame == b'event: snapshot\nid: 7\ndata: {"text":"two\\nlines"}\n\n'

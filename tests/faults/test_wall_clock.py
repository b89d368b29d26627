"""Fault: the wall clock jumps (an NTP step, `date -s`, a VM resumed): an hour forward, a
day back. Only the monotonic clock drives timeouts, so none fires early or late: the real
clock measures with the monotonic clock (checked against a wall clock forced to jump), every
reading of the wall clock in infless is a stamp on a record, named here with its reason (a
new one fails this suite until it is justified), and the timeout paths — the request
timeout's 504, the batch deadline, the control loops' ticks, a slow client's 408 — keep
their times on a fake clock whose wall clock jumps between steps."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import numpy as np
import pytest

from infless import clock as clock_module
from infless.clock import RealClock, Ticker
from infless.dataplane.policy import BatchSettings
from infless.dataplane.queue import BatchQueue
from infless.dataplane.request import Pending
from infless.gateway.connections import ConnectionLimits
from tests.support.clock import FakeClock
from tests.support.fastpath import connect, post, responses

PACKAGE = Path(clock_module.__file__).parent
HOUR_S, DAY_S = 3600.0, 86400.0

# Every module that reads the wall clock, and why that reading is only a stamp.
WALL_READERS = {
    "app.py": "the timestamps of the functions' log lines (LogBuffer)",
    "gateway/invoke.py": "OpenFaaS's X-Start-Time response header",
    "control/service.py": "a deployment's createdAt",
    "control/modelless.py": "a registration's registeredAt and its variants' createdAt",
    "transform/profile.py": "when meta-operator costs were measured (stored with them)",
    "profiler/calibration.py": "when the calibration was measured (stored with it)",
    "profiler/profiling.py": "when operator profiles were measured (stored with them)",
    "profiler/gpu_profile.py": "when a GPU profile was measured (stored with it)",
    "client/logs_command.py": "`infless logs --since`: the user's own wall time",
    "gateway/board/hub.py": "the live board's snapshot time `t`, shown to the user",
    "gateway/board/series.py": "the live board's points' time axis (rates use monotonic)",
}
_WALL_NAMES = {"wall", "wall_s", "wall_ns", "time", "time_ns", "now", "utcnow", "today"}
_WALL_OWNERS = {"time", "datetime", "date"}


def _reads_wall_clock(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "wall":
            return True  # Clock.wall, called or handed on
        if isinstance(node, ast.Name) and node.id in {"wall_s", "wall_ns"}:
            return True
        if (
            isinstance(node, ast.Attribute)
            and node.attr in _WALL_NAMES
            and isinstance(node.value, ast.Name)
            and node.value.id in _WALL_OWNERS
        ):
            return True  # time.time(), datetime.now(), date.today()
    return False


def test_every_wall_clock_reading_is_a_stamp_with_a_reason() -> None:
    readers = {
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if path.name != "clock.py" and _reads_wall_clock(ast.parse(path.read_text()))
    }
    unexplained = sorted(readers - set(WALL_READERS))
    assert not unexplained, (
        f"{unexplained} read the wall clock: timeouts and deadlines take Clock.now() "
        "(monotonic); if the reading only stamps a record, add it to WALL_READERS with why"
    )
    assert readers == set(WALL_READERS), "a listed module no longer reads it: drop it"


def test_the_real_clock_keeps_time_by_the_monotonic_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monotonic = [100.0]
    monkeypatch.setattr("time.monotonic", lambda: monotonic[0])
    monkeypatch.setattr("time.time", lambda: 1.7e9 + DAY_S)  # a jumped wall
    delays: list[float] = []

    async def recorded_sleep(delay: float) -> None:
        delays.append(delay)

    monkeypatch.setattr("asyncio.sleep", recorded_sleep)
    clock = RealClock()
    assert clock.now() == 100.0
    asyncio.run(clock.sleep_until(100.5))
    assert delays == [0.5]
    assert clock.wall() == 1.7e9 + DAY_S, "wall() is only for stamps"


async def test_the_request_timeout_fires_on_time_whatever_the_wall_clock_does() -> None:
    connection, transport, _, server, clock = connect()  # request timeout: 10 s
    server.start()
    connection.data_received(post("later", b"x"))
    clock.jump_wall(HOUR_S)
    await clock.advance(5.0)
    clock.jump_wall(-DAY_S)
    await clock.advance(4.5)
    assert transport.written == b"", "not before its 10 s"
    await clock.advance(1.0)
    assert responses(transport)[0].startswith(b"HTTP/1.1 504 ")


async def test_a_slow_client_is_cut_on_time_whatever_the_wall_clock_does() -> None:
    limits = ConnectionLimits(read_timeout_s=5.0, idle_timeout_s=600.0, max_connections=10)
    connection, transport, _, server, clock = connect(limits=limits)
    server.start()
    connection.data_received(b"POST /function/now HTTP/1.1\r\n")
    clock.jump_wall(-DAY_S)
    await clock.advance(4.5)
    assert transport.written == b""
    clock.jump_wall(HOUR_S)
    await clock.advance(1.0)
    assert responses(transport)[0].startswith(b"HTTP/1.1 408 ")


async def test_a_batch_leaves_at_its_deadline_whatever_the_wall_clock_does() -> None:
    clock = FakeClock()
    queue = BatchQueue(clock, BatchSettings(4, 0.050, 16, exec_ms=5.0))
    future = asyncio.get_running_loop().create_future()
    queue.submit(Pending(inputs={"x": np.zeros(1)}, arrival_s=clock.now(), future=future))
    taken = asyncio.create_task(queue.next_batch())
    clock.jump_wall(HOUR_S)
    await clock.advance(0.049)
    clock.jump_wall(-DAY_S)
    await asyncio.sleep(0)
    assert not taken.done(), "not before its deadline"
    await clock.advance(0.001)
    assert len(await asyncio.wait_for(taken, 1.0)) == 1


async def test_control_loops_tick_on_time_whatever_the_wall_clock_does() -> None:
    clock = FakeClock()
    ticks: list[float] = []
    ticker = Ticker(clock, 1.0, lambda: ticks.append(clock.now()), "test")
    ticker.start()
    await asyncio.sleep(0)
    for jump_s in (HOUR_S, -DAY_S, 7 * DAY_S):
        clock.jump_wall(jump_s)
        await clock.advance(1.0)
    await ticker.stop()
    assert ticks == [1001.0, 1002.0, 1003.0]

"""BatchQueue: a batch leaves when full or exactly at its deadline, on a fake clock."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from infless.dataplane.policy import BatchSettings
from infless.dataplane.queue import BatchQueue, QueueClosed, QueueFull
from infless.dataplane.request import Pending
from tests.support.clock import FakeClock


def _pending(clock: FakeClock) -> Pending:
    future = asyncio.get_running_loop().create_future()
    return Pending(inputs={"x": np.zeros(1)}, arrival_s=clock.now(), future=future)


def _queue(
    clock: FakeClock, batch_size: int = 4, timeout_s: float = 0.045, capacity: int = 16
) -> BatchQueue:
    return BatchQueue(clock, BatchSettings(batch_size, timeout_s, capacity, exec_ms=5.0))


async def test_full_batch_leaves_without_waiting_for_the_deadline() -> None:
    clock = FakeClock()
    queue = _queue(clock)
    items = [_pending(clock) for _ in range(4)]
    for item in items:
        queue.submit(item)
    batch = await asyncio.wait_for(queue.next_batch(), 1.0)
    assert batch == items
    assert len(queue) == 0


async def test_partial_batch_waits_exactly_until_the_oldest_deadline() -> None:
    clock = FakeClock()
    queue = _queue(clock, timeout_s=0.045)
    first = _pending(clock)
    queue.submit(first)
    await clock.advance(0.010)
    second = _pending(clock)
    queue.submit(second)
    task = asyncio.create_task(queue.next_batch())
    await clock.advance(0.034)  # 44 ms after the first arrival: not yet
    assert not task.done()
    await clock.advance(0.001)  # 45 ms: the deadline of the oldest request
    batch = await asyncio.wait_for(task, 1.0)
    assert batch == [first, second]


async def test_filling_the_batch_wakes_a_waiting_runner_before_the_deadline() -> None:
    clock = FakeClock()
    queue = _queue(clock, batch_size=3, timeout_s=10.0)
    task = asyncio.create_task(queue.next_batch())
    items = [_pending(clock) for _ in range(3)]
    for item in items:
        queue.submit(item)
        await asyncio.sleep(0)
    batch = await asyncio.wait_for(task, 1.0)
    assert batch == items
    assert clock.sleeper_count == 0


async def test_batch_takes_at_most_batch_size_and_leaves_the_rest() -> None:
    clock = FakeClock()
    queue = _queue(clock, batch_size=2)
    items = [_pending(clock) for _ in range(5)]
    for item in items:
        queue.submit(item)
    assert await queue.next_batch() == items[:2]
    assert await queue.next_batch() == items[2:4]
    assert len(queue) == 1


async def test_queue_is_bounded() -> None:
    clock = FakeClock()
    queue = _queue(clock, batch_size=2, capacity=2)
    queue.submit(_pending(clock))
    queue.submit(_pending(clock))
    assert not queue.has_room
    with pytest.raises(QueueFull):
        queue.submit(_pending(clock))


async def test_close_flushes_what_is_queued_then_reports_closed() -> None:
    clock = FakeClock()
    queue = _queue(clock, batch_size=4, timeout_s=10.0)
    item = _pending(clock)
    queue.submit(item)
    queue.close()
    assert await queue.next_batch() == [item]
    with pytest.raises(QueueClosed):
        await queue.next_batch()
    with pytest.raises(QueueClosed):
        queue.submit(_pending(clock))


async def test_take_all_returns_waiting_requests_for_rerouting() -> None:
    clock = FakeClock()
    queue = _queue(clock)
    items = [_pending(clock) for _ in range(3)]
    for item in items:
        queue.submit(item)
    assert queue.take_all() == items
    assert len(queue) == 0


async def test_eager_dispatch_takes_whatever_waits_when_the_worker_asks() -> None:
    clock = FakeClock()
    queue = BatchQueue(clock, BatchSettings(8, 10.0, 32, exec_ms=5.0, mode="eager"))
    item = _pending(clock)
    queue.submit(item)
    assert await asyncio.wait_for(queue.next_batch(), 1.0) == [item]


async def test_adaptive_dispatch_goes_early_when_the_batch_cannot_fill_in_time() -> None:
    clock = FakeClock()
    queue = BatchQueue(clock, BatchSettings(4, 0.100, 16, exec_ms=5.0, mode="adaptive"))
    first = _pending(clock)
    queue.submit(first)
    await clock.advance(0.030)
    second = _pending(clock)
    queue.submit(second)  # the gap between arrivals is 30 ms; two more need ~60 ms
    task = asyncio.create_task(queue.next_batch())
    await clock.advance(0.009)  # 39 ms: the batch could still fill before the deadline
    assert not task.done()
    await clock.advance(0.002)  # past 40 ms = deadline 100 ms - 60 ms to fill: gone
    assert task.done()
    assert await asyncio.wait_for(task, 1.0) == [first, second]


async def test_adaptive_dispatch_waits_for_a_batch_that_fills_in_time() -> None:
    clock = FakeClock()
    queue = BatchQueue(clock, BatchSettings(4, 0.100, 16, exec_ms=5.0, mode="adaptive"))
    for _ in range(4):  # history: requests arrive every 5 ms
        queue.submit(_pending(clock))
        await clock.advance(0.005)
    assert len(await queue.next_batch()) == 4
    items = [_pending(clock)]
    queue.submit(items[0])
    task = asyncio.create_task(queue.next_batch())
    await asyncio.sleep(0)
    assert not task.done()  # three more should come within ~15 ms, long before 100 ms
    for _ in range(3):
        await clock.advance(0.005)
        items.append(_pending(clock))
        queue.submit(items[-1])
    assert await asyncio.wait_for(task, 1.0) == items


async def test_adaptive_dispatch_of_a_lone_first_request_is_immediate() -> None:
    clock = FakeClock()
    queue = BatchQueue(clock, BatchSettings(8, 0.100, 32, exec_ms=5.0, mode="adaptive"))
    item = _pending(clock)
    queue.submit(item)  # no gap history: nothing suggests the batch will fill
    assert await asyncio.wait_for(queue.next_batch(), 1.0) == [item]

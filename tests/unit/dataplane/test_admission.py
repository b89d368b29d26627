"""Admission by deadline, and batches released by deadline ("slo" dispatch), on real
instances with in-process workers and a fake clock."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from infless.dataplane.instance import Instance
from infless.dataplane.policy import BatchSettings
from infless.dataplane.request import Pending
from infless.dataplane.router import FunctionRouter
from infless.errors import Overloaded
from infless.types import InstanceConfig, TensorSpec
from infless.workers import protocol as p
from tests.support.clock import FakeClock
from tests.support.events import EventLog
from tests.support.inprocess import InProcessModel, InProcessWorkerHandle, constant_ms

SPECS = (TensorSpec("x", "float32", (2,)),)
EXEC_MS = 10.0  # every batch, whatever its size: easy arithmetic


class Harness:
    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.events = EventLog()
        self.router = FunctionRouter("f", clock, waiting_capacity=4, events=self.events)
        self.handles: list[InProcessWorkerHandle] = []

    def add(self, batch_size: int = 2, mode: str = "slo") -> Instance:
        instance = Instance(
            instance_id=f"f-{len(self.handles)}",
            function_name="f",
            config=InstanceConfig(batch_size, 1),
            cpu_ids=(0,),
            clock=self.clock,
            input_specs=SPECS,
            events=self.events,
        )
        self.router.add(instance)
        handle = InProcessWorkerHandle(InProcessModel(latency_ms=constant_ms(EXEC_MS)), self.clock)
        ready = p.Ready(pid=0, exec_ms={1: EXEC_MS, batch_size: EXEC_MS}, start=p.StartBreakdown())
        settings = BatchSettings(batch_size, 0.04, 64, EXEC_MS, mode=mode)  # type: ignore[arg-type]
        instance.become_ready(handle, settings, ready)
        self.router.instance_ready(instance)
        self.handles.append(handle)
        return instance

    def submit(self, budget_s: float) -> Pending:
        return self.router.submit({"x": np.zeros(2, dtype=np.float32)}, budget_s)


async def _spin() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_a_request_that_cannot_be_served_in_time_is_refused_at_once() -> None:
    clock = FakeClock()
    harness = Harness(clock)
    instance = harness.add(batch_size=2)
    first = [harness.submit(1.0) for _ in range(2)]  # a full batch: runs now
    await _spin()
    queued = [harness.submit(1.0) for _ in range(4)]  # two more full batches behind it
    model = instance.model
    assert model is not None
    # a seventh would finish after the batch in flight (at its tail) and two full batches
    # (at their mean service times), then its own at its tail
    mean_s, tail_s = model.mean_ms(2) / 1000.0, model.tail_ms(2) / 1000.0
    finish_s = instance.finish_by_s(clock.now())
    assert finish_s == pytest.approx(clock.now() + tail_s + 2 * mean_s + model.tail_ms(1) / 1e3)
    admitted = harness.submit(finish_s - clock.now() + 0.001)
    with pytest.raises(Overloaded) as refused:
        harness.submit(finish_s - clock.now() - 0.001)
    assert refused.value.retry_after_s is not None
    assert refused.value.retry_after_s >= 1.0
    assert harness.router.rejected == 1
    assert instance.queue_length == 5  # the refused one was never queued
    for _ in range(20):
        await clock.advance(0.005)
    outcomes = [await asyncio.wait_for(x.future, 1.0) for x in (*first, *queued, admitted)]
    budget_ms = (finish_s - admitted.arrival_s) * 1000.0 + 1.0
    assert outcomes[-1].queue_ms + outcomes[-1].service_ms <= budget_ms + 1e-6


async def test_the_router_moves_a_late_request_to_an_instance_that_makes_it() -> None:
    clock = FakeClock()
    harness = Harness(clock)
    busy, idle = harness.add(batch_size=1), harness.add(batch_size=1)
    idle.share_rps, busy.share_rps = 1e-6, 1e6  # the dispatcher always proposes `busy`
    chain = [harness.submit(1.0) for _ in range(3)]  # 30 ms of work queued on `busy`
    assert busy.queue_length + busy.in_flight == 3
    # busy would be done in 60 ms (the batch in flight at its tail, twice the mean until
    # batches are measured; two queued at their mean; its own at its tail), idle in 20 ms
    late_on_busy = harness.submit(0.025)
    await _spin()
    assert harness.handles[1].batch_sizes == [1]  # served by the idle instance
    await clock.advance(0.011)  # it really takes 10 ms
    assert (await asyncio.wait_for(late_on_busy.future, 1.0)).instance_id == idle.instance_id
    for _ in range(8):
        await clock.advance(0.01)
    await asyncio.wait_for(asyncio.gather(*(c.future for c in chain)), 1.0)


async def test_check_room_refuses_before_anything_is_decoded() -> None:
    clock = FakeClock()
    harness = Harness(clock)
    harness.add(batch_size=1)
    for _ in range(5):
        harness.submit(1.0)  # 50 ms of work (more at the tail)
    instance = harness.router.instances[0]
    ahead_s = instance.finish_by_s(clock.now()) - clock.now()
    harness.router.check_room(ahead_s + 0.001)  # fits
    with pytest.raises(Overloaded):
        harness.router.check_room(ahead_s - 0.001)
    assert harness.router.rejected == 1
    for _ in range(12):
        await clock.advance(0.01)


async def test_has_room_predicts_the_finish_even_when_idle_and_counts_nothing() -> None:
    clock = FakeClock()
    harness = Harness(clock)
    assert not harness.router.has_room(1.0)  # nothing ready: a query would wait (cold)
    instance = harness.add(batch_size=1)
    model = instance.model
    assert model is not None
    tail_s = model.tail_ms(1) / 1000.0
    # idle: admission would take it whatever the budget; the probe wants it in time
    harness.router.check_room(0.0)
    assert not harness.router.has_room(tail_s - 0.001)
    assert harness.router.has_room(tail_s + 0.001)
    for _ in range(5):
        harness.submit(1.0)
    instance = harness.router.instances[0]
    ahead_s = instance.finish_by_s(clock.now()) - clock.now()
    assert harness.router.has_room(ahead_s + 0.001)
    assert not harness.router.has_room(ahead_s - 0.001)
    assert (harness.router.rejected, harness.router.arrivals) == (0, 5)
    for _ in range(12):
        await clock.advance(0.01)


async def test_has_room_is_false_for_an_instance_whose_queue_is_full() -> None:
    """Whatever the budget: admission would not queue there (a model-less query spills
    over to another variant instead of staying to be refused)."""
    clock = FakeClock()
    harness = Harness(clock)
    instance = harness.add(batch_size=1)
    while instance.accepting:
        harness.submit(1e6)
    assert not harness.router.has_room(1e6)
    for _ in range(200):
        await clock.advance(0.01)
    assert harness.router.instances[0].accepting  # drained
    assert harness.router.has_room(1e6)


async def test_a_partial_batch_waits_a_bounded_time_and_never_past_its_latest_start() -> None:
    clock = FakeClock()
    harness = Harness(clock)
    harness.add(batch_size=8)
    harness.submit(0.050)  # the first goes at once (nothing is known of the rate yet)
    waiting = []
    for _ in range(7):  # then 1 ms apart: ~1000 rps, which only a full batch of 8 sustains
        await clock.advance(0.001)
        waiting.append(harness.submit(0.050))
    oldest_s = waiting[0].arrival_s
    # the worker is free again at 10 ms; the 7 waiting are one short of the target (8). The
    # batch goes FILL_SLACK x 8 gaps (16 ms) after the oldest arrival, before its latest
    # start (its deadline, 50 ms after it, less the 20 ms a batch takes at its tail)
    while clock.now() < oldest_s + 0.0152:
        await clock.advance(0.0005)
    assert harness.handles[0].batch_sizes == [1]
    await clock.advance(0.001)
    assert harness.handles[0].batch_sizes == [1, 7]
    for _ in range(12):
        await clock.advance(0.002)
    outcomes = [await asyncio.wait_for(w.future, 1.0) for w in waiting]
    assert outcomes[0].queue_ms == pytest.approx(16.0, abs=0.6)
    assert all(o.queue_ms + o.service_ms <= 50.0 + 1e-6 for o in outcomes)


async def test_an_idle_instance_admits_even_when_its_tail_exceeds_the_budget() -> None:
    """A model slower than the budget at its (first, conservative) tail is still served when
    nothing waits: refusing would refuse every request forever, and never measure again."""
    clock = FakeClock()
    harness = Harness(clock)
    instance = harness.add(batch_size=1)
    assert instance.finish_by_s(clock.now()) > clock.now() + 0.015  # 20 ms at the tail
    harness.router.check_room(0.015)
    served = harness.submit(0.015)
    await _spin()  # its batch starts
    with pytest.raises(Overloaded):  # busy now: the next one would be late
        harness.submit(0.015)
    await clock.advance(0.011)
    assert (await asyncio.wait_for(served.future, 1.0)).batch_size == 1

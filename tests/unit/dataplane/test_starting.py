"""Admission counting a starting instance (`dataplane.starting`): a request no ready instance
can serve by its deadline waits for the instance that is starting when, ready at its
expected time, it would serve it in time — else 429; on real instances with in-process
workers and a fake clock."""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest

from infless.dataplane.instance import Instance, InstanceState
from infless.dataplane.latency import ExecModel
from infless.dataplane.policy import BatchSettings
from infless.dataplane.request import Pending
from infless.dataplane.router import FunctionRouter
from infless.dataplane.starting import Expected, finish_after_start_s, predicted_start_s
from infless.errors import Overloaded
from infless.types import InstanceConfig, TensorSpec
from infless.workers import protocol as p
from tests.support.clock import FakeClock
from tests.support.events import EventLog
from tests.support.inprocess import InProcessModel, InProcessWorkerHandle, constant_ms

SPECS = (TensorSpec("x", "float32", (2,)),)
EXEC_MS = 10.0  # every batch, whatever its size
TAIL_S = 2 * EXEC_MS / 1000.0  # the tail until batches are measured (FIRST_TAIL_RATIO = 2)
START_S = 0.1  # how long the replacement is expected to take


class Harness:
    """One function, batch size 1: a busy ready instance and, when asked, a starting one."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.events = EventLog()
        self.router = FunctionRouter("f", clock, 16, self.events)
        self.count = 0

    def instance(self, instance_id: str | None = None) -> Instance:
        self.count += 1
        instance = Instance(
            instance_id=instance_id or f"f-{self.count}",
            function_name="f",
            config=InstanceConfig(1, 1),
            cpu_ids=(0,),
            clock=self.clock,
            input_specs=SPECS,
            events=self.events,
            worker_id=f"w-{self.count}",
        )
        self.router.add(instance)
        return instance

    def make_ready(self, instance: Instance) -> InProcessWorkerHandle:
        handle = InProcessWorkerHandle(InProcessModel(latency_ms=constant_ms(EXEC_MS)), self.clock)
        ready = p.Ready(pid=0, exec_ms={1: EXEC_MS}, start=p.StartBreakdown())
        instance.become_ready(handle, BatchSettings(1, 0.04, 64, EXEC_MS, mode="slo"), ready)
        self.router.instance_ready(instance)
        return handle

    def submit(self, budget_s: float) -> Pending:
        return self.router.submit({"x": np.zeros(2, dtype=np.float32)}, budget_s)

    def replacement(self, expected_in_s: float | None = START_S) -> Instance:
        """A ready instance dies and is removed; its replacement (same id) starts."""
        dead = self.instance("f-replaced")
        self.make_ready(dead)
        dead.state = InstanceState.DEAD
        self.router.remove(dead)
        starting = self.instance("f-replaced")
        now = self.clock.now()
        starting.expected_ready_s = None if expected_in_s is None else now + expected_in_s
        return starting

    def fill(self, survivor: Instance) -> None:
        """Keep the survivor busy: 0.2 s of work in front of any new request."""
        for _ in range(20):
            self.submit(1.0)
        assert survivor.finish_by_s(self.clock.now()) > self.clock.now() + 0.2


async def _advance(clock: FakeClock, seconds: float) -> None:
    for _ in range(round(seconds / 0.005)):
        await clock.advance(0.005)


def test_the_next_start_is_predicted_at_its_tail_and_unknown_before_any() -> None:
    assert predicted_start_s([]) is None
    assert predicted_start_s([0.4, 1.2, 0.5]) == 1.2


def test_a_waiting_request_is_served_after_those_ahead_of_it() -> None:
    model = ExecModel({1: 10.0, 4: 20.0}, max_batch=4)
    expected = Expected(ready_at_s=5.0, model=model, batch_size=4)
    # nobody ahead: its own batch of one at its tail, from the moment it is ready
    assert finish_after_start_s(expected, 4.0, 0) == pytest.approx(5.0 + model.tail_ms(1) / 1e3)
    # nine ahead: two full batches at their mean, then its own batch of two at its tail
    assert finish_after_start_s(expected, 4.0, 9) == pytest.approx(
        5.0 + (2 * model.mean_ms(4) + model.tail_ms(2)) / 1e3
    )
    # a start later than expected counts for nothing: its prediction failed
    assert finish_after_start_s(expected, 5.5, 0) == math.inf


async def test_a_request_the_replacement_can_serve_in_time_waits_for_it_not_429() -> None:
    clock = FakeClock()
    harness = Harness(clock)
    survivor = harness.instance()
    harness.make_ready(survivor)
    harness.fill(survivor)
    starting = harness.replacement()
    assert starting.expected_model is not None  # the service times its predecessor measured

    # ready in 0.1 s, then its batch of one at its tail: 0.12 s; one waiting ahead: 0.13 s
    first = harness.submit(START_S + TAIL_S + 0.001)
    second = harness.submit(START_S + EXEC_MS / 1e3 + TAIL_S + 0.001)
    assert harness.router.waiting == 2
    with pytest.raises(Overloaded) as refused:  # a third would be served too late
        harness.submit(START_S + 2 * EXEC_MS / 1e3 + TAIL_S - 0.001)
    assert refused.value.retry_after_s is not None
    assert harness.router.rejected == 1

    await _advance(clock, START_S)
    handle = harness.make_ready(starting)
    await _advance(clock, 0.05)
    outcomes = [await asyncio.wait_for(x.future, 1.0) for x in (first, second)]
    assert {o.instance_id for o in outcomes} == {"f-replaced"}
    assert all(o.cold_start_ms > 0 for o in outcomes)  # they waited for the start
    assert handle.batch_sizes == [1, 1]
    await _advance(clock, 0.2)


async def test_the_early_refusal_counts_the_starting_instance_too() -> None:
    clock = FakeClock()
    harness = Harness(clock)
    survivor = harness.instance()
    harness.make_ready(survivor)
    harness.fill(survivor)
    harness.replacement()
    harness.router.check_room(START_S + TAIL_S + 0.001)  # the replacement would make it
    with pytest.raises(Overloaded):
        harness.router.check_room(START_S + TAIL_S - 0.001)
    await _advance(clock, 0.2)


@pytest.mark.parametrize("expected_in_s", [None, -0.001], ids=["no start measured", "overdue"])
async def test_a_start_that_cannot_be_predicted_is_not_counted(
    expected_in_s: float | None,
) -> None:
    clock = FakeClock()
    harness = Harness(clock)
    survivor = harness.instance()
    harness.make_ready(survivor)
    harness.fill(survivor)
    harness.replacement(expected_in_s)
    with pytest.raises(Overloaded):
        harness.submit(START_S + 2 * TAIL_S)  # the survivor cannot make it, a start would
    assert harness.router.waiting == 0
    await _advance(clock, 0.2)


async def test_a_start_without_service_times_of_its_shape_is_not_counted() -> None:
    clock = FakeClock()
    harness = Harness(clock)
    survivor = harness.instance()
    harness.make_ready(survivor)
    harness.fill(survivor)
    other = Instance(
        "f-other", "f", InstanceConfig(1, 2), (0, 1), clock, SPECS, events=EventLog()
    )  # two cores: the survivor's times say nothing of it
    harness.router.add(other)
    other.expected_ready_s = clock.now() + START_S
    assert other.expected_model is None
    with pytest.raises(Overloaded):
        harness.submit(START_S + 2 * TAIL_S)
    await _advance(clock, 0.2)


async def test_requests_waiting_for_a_start_that_fails_go_to_the_ready_instances() -> None:
    clock = FakeClock()
    harness = Harness(clock)
    survivor = harness.instance()
    harness.make_ready(survivor)
    harness.fill(survivor)
    starting = harness.replacement()
    waiting = harness.submit(START_S + TAIL_S + 0.001)
    assert harness.router.waiting == 1

    starting.start_failed("boom")  # what the pool does with a failed start
    harness.router.remove(starting)
    harness.router.start_failed("boom")
    assert harness.router.waiting == 0  # admitted: it is served, late, never dropped
    await _advance(clock, 0.5)
    outcome = await asyncio.wait_for(waiting.future, 1.0)
    assert outcome.instance_id == survivor.instance_id

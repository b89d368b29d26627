"""FunctionRouter with real Instances on in-process workers: batching, retries, overload."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from infless.dataplane.events import DataPlaneEvent, InstanceLost, RetuneDue
from infless.dataplane.instance import RETUNE_EVERY_BATCHES, Instance, InstanceState
from infless.dataplane.policy import BatchSettings
from infless.dataplane.request import Pending
from infless.dataplane.router import FunctionRouter
from infless.errors import Overloaded, WorkerUnavailable
from infless.handlers import HandlerError, Request, Response
from infless.types import InstanceConfig, TensorSpec
from infless.workers import protocol as p
from tests.support.clock import FakeClock
from tests.support.events import EventLog
from tests.support.inprocess import InProcessModel, InProcessWorkerHandle, constant_ms

SPECS = (TensorSpec("x", "float32", (2,)),)


class Harness:
    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.events = EventLog(then=self._loop)
        self.router = FunctionRouter("f", clock, waiting_capacity=4, events=self.events)
        self.count = 0

    def add_instance(
        self,
        batch_size: int = 4,
        capacity: int = 8,
        timeout_s: float = 0.04,
        model: InProcessModel | None = None,
    ) -> tuple[Instance, InProcessWorkerHandle]:
        self.count += 1
        instance = Instance(
            f"f-{self.count}",
            "f",
            InstanceConfig(batch_size, 1),
            (0,),
            self.clock,
            SPECS,
            events=self.events,
        )
        self.router.add(instance)
        handle = InProcessWorkerHandle(model)
        ready = p.Ready(pid=0, exec_ms={batch_size: 5.0}, start=p.StartBreakdown())
        instance.become_ready(handle, BatchSettings(batch_size, timeout_s, capacity, 5.0), ready)
        self.router.instance_ready(instance)
        return instance, handle

    def _loop(self, event: DataPlaneEvent) -> None:
        """What the control loop does with a lost instance: its requests go elsewhere."""
        if isinstance(event, InstanceLost):
            self.router.remove(event.instance)
            self.router.adopt_orphans(event.orphans)

    def submit(self, value: float) -> asyncio.Future[object]:
        return self.router.submit({"x": np.array([value, value], dtype=np.float32)}).future  # type: ignore[return-value]


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_concurrent_requests_share_one_batch_and_get_their_own_rows() -> None:
    harness = Harness(FakeClock())
    _, handle = harness.add_instance(batch_size=4)
    futures = [harness.submit(float(v)) for v in range(4)]
    results = await asyncio.wait_for(asyncio.gather(*futures), 1.0)
    assert handle.batch_sizes == [4]
    for value, outcome in enumerate(results):
        assert outcome.outputs["y"].tolist() == [2.0 * value, 2.0 * value]  # type: ignore[attr-defined]
        assert outcome.batch_size == 4  # type: ignore[attr-defined]


async def test_partial_batch_goes_at_the_deadline() -> None:
    clock = FakeClock()
    harness = Harness(clock)
    _, handle = harness.add_instance(batch_size=4, timeout_s=0.04)
    futures = [harness.submit(1.0), harness.submit(2.0)]
    await _settle()
    assert handle.batch_sizes == []
    await clock.advance(0.04)
    await asyncio.wait_for(asyncio.gather(*futures), 1.0)
    assert handle.batch_sizes == [2]


async def test_full_queues_give_429_with_retry_after() -> None:
    harness = Harness(FakeClock())
    _, handle = harness.add_instance(batch_size=2, capacity=2)
    handle.gate.clear()  # the worker holds its first batch
    harness.submit(1.0)
    harness.submit(2.0)
    await _settle()  # first batch in flight
    harness.submit(3.0)
    harness.submit(4.0)  # queue now full
    with pytest.raises(Overloaded) as info:
        harness.submit(5.0)
    assert info.value.retry_after_s is not None
    handle.gate.set()


async def test_worker_death_mid_batch_retries_on_another_instance() -> None:
    harness = Harness(FakeClock())
    first, dying = harness.add_instance(batch_size=2)
    dying.gate.clear()
    futures = [harness.submit(1.0), harness.submit(2.0)]
    await _settle()
    assert dying.batch_sizes == [2]
    _, healthy = harness.add_instance(batch_size=2)
    dying.die()
    results = await asyncio.wait_for(asyncio.gather(*futures), 1.0)
    assert [r.outputs["y"][0] for r in results] == [2.0, 4.0]  # type: ignore[attr-defined]
    assert healthy.batch_sizes == [2]
    assert first.state is InstanceState.DEAD
    assert harness.router.retries == 2


async def test_second_death_answers_503() -> None:
    harness = Harness(FakeClock())
    _, one = harness.add_instance(batch_size=1)
    one.gate.clear()
    future = harness.submit(1.0)
    await _settle()
    _, two = harness.add_instance(batch_size=1)
    two.gate.clear()
    one.die()
    await _settle()
    two.die()
    with pytest.raises(WorkerUnavailable, match="died twice"):
        await asyncio.wait_for(future, 1.0)


async def test_no_instance_means_cold_start_then_served_when_one_is_ready() -> None:
    clock = FakeClock()
    harness = Harness(clock)
    future = harness.submit(3.0)
    assert harness.events.wakes == ["f"]
    assert harness.router.waiting == 1
    await clock.advance(1.5)
    harness.add_instance(batch_size=1, timeout_s=0.0)
    outcome = await asyncio.wait_for(future, 1.0)
    assert outcome.cold_start_ms == pytest.approx(1500.0)  # type: ignore[attr-defined]


async def test_waiting_room_is_bounded_and_start_failure_answers_503() -> None:
    harness = Harness(FakeClock())
    futures = [harness.submit(1.0) for _ in range(4)]
    with pytest.raises(Overloaded):
        harness.submit(1.0)
    harness.router.start_failed("model exploded")
    for future in futures:
        with pytest.raises(WorkerUnavailable, match="model exploded"):
            await future


async def test_while_starts_fail_new_requests_get_503_at_once_until_one_is_ready() -> None:
    harness = Harness(FakeClock())
    first = harness.submit(1.0)
    harness.router.start_failed("import error")
    with pytest.raises(WorkerUnavailable):
        await first
    with pytest.raises(WorkerUnavailable, match="could not start an instance: import error"):
        harness.submit(2.0)  # refused now, not left waiting for the gateway's timeout
    assert harness.events.wakes == ["f", "f"]  # the pool may try again (its backoff)
    harness.add_instance(batch_size=1, timeout_s=0.0)
    outcome = await asyncio.wait_for(harness.submit(3.0), 1.0)
    assert outcome.outputs["y"].tolist() == [6.0, 6.0]  # type: ignore[attr-defined]


async def test_served_batches_update_exec_times_and_retune_the_queue() -> None:
    clock = FakeClock()
    events = EventLog()
    instance = Instance("f-1", "f", InstanceConfig(2, 1), (0,), clock, SPECS, events)
    handle = InProcessWorkerHandle(InProcessModel(latency_ms=constant_ms(20.0)))
    ready = p.Ready(pid=0, exec_ms={1: 4.0, 2: 5.0}, start=p.StartBreakdown())
    instance.become_ready(handle, BatchSettings(2, 0.04, 8, 5.0), ready)
    queue = instance.queue
    assert queue is not None
    loop = asyncio.get_running_loop()
    for _ in range(RETUNE_EVERY_BATCHES):
        pair = [
            queue.submit(Pending({"x": np.zeros(2, np.float32)}, clock.now(), loop.create_future()))
            for _ in range(2)
        ]
        await asyncio.wait_for(asyncio.gather(*pair), 1.0)
    assert instance.batches == RETUNE_EVERY_BATCHES
    assert 5.0 < instance.exec_ms_by_batch[2] < 20.0  # moved from warm-up towards served
    assert instance.exec_ms_by_batch[2] > 19.0  # 32 batches at 20 ms: nearly there
    # no batch of one was served, but the host is four times slower at every size
    assert instance.exec_ms_by_batch[1] / 4.0 == pytest.approx(
        instance.exec_ms_by_batch[2] / 5.0, rel=1e-6
    )
    (due,) = events.events  # the instance asks once; the control loop decides
    assert isinstance(due, RetuneDue)
    assert due.instance is instance
    assert due.exec_ms == instance.exec_ms_by_batch
    assert queue.settings.capacity == 8  # unchanged until the loop answers
    instance.retune(BatchSettings(2, 0.001, 2, due.exec_ms[2]))
    assert queue.settings.capacity == 2
    assert queue.settings.exec_ms == instance.exec_ms_by_batch[2]
    await instance.drain(1.0)


class Shouting:
    """A handler: text in, its code points doubled by the model, text out."""

    def __init__(self, package_dir: object) -> None:
        pass

    def preprocess(self, request: Request) -> dict[str, np.ndarray]:
        if not request.body:
            raise HandlerError("empty body")
        return {"x": np.array([len(request.body), 1.0], dtype=np.float32)}

    def postprocess(self, outputs: dict[str, np.ndarray]) -> Response:
        return Response(f"{outputs['y'][0]:g}".encode(), "text/plain")


async def test_raw_requests_of_a_handler_function_batch_and_answer_one_by_one() -> None:
    harness = Harness(FakeClock())
    model = InProcessModel(handler=Shouting(None), input_specs=SPECS)
    _, handle = harness.add_instance(batch_size=3, model=model)
    bodies = [b"abc", b"", b"hello"]
    futures = [harness.router.submit(p.RawRequest(b, "text/plain")).future for b in bodies]
    outcomes = await asyncio.wait_for(asyncio.gather(*futures), 1.0)
    assert handle.batch_sizes == [3]
    answers = [o.answer for o in outcomes]
    assert all(a is not None for a in answers)
    assert [(a.status, a.body) for a in answers if a is not None] == [
        (200, b"6"),
        (400, b'{"error": "empty body", "code": "handler_error"}'),
        (200, b"10"),
    ]
    assert all(o.outputs == {} and o.batch_size == 3 for o in outcomes)

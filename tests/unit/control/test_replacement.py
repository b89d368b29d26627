"""A worker that dies while its function is busy: the pool starts its replacement expecting
it ready when the function's measured starts say, and a request the surviving instance
cannot serve by its deadline waits for the replacement instead of a 429 — the real pool,
frontend, router and queues with in-process workers on a fake clock."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from infless.cluster.cpus import CpuAllocator
from infless.control.functions import FunctionFrontDoor
from infless.control.pool import WorkerPool
from infless.control.servers import LOCAL_SERVER, Server
from infless.dataplane.config import BatchingConfig
from infless.dataplane.instance import Instance, InstanceState
from infless.dataplane.request import Array, Outcome
from infless.errors import Overloaded
from infless.types import FunctionSpec
from tests.support.clock import FakeClock
from tests.support.doubling import DOUBLING_MANIFEST
from tests.support.frontend import Recorder
from tests.support.inprocess import InProcessModel, InProcessStarter, constant_ms

START_S = 0.05  # every in-process start takes this long on the fake clock
EXEC_MS = 10.0
MANIFEST = DOUBLING_MANIFEST
SPEC = FunctionSpec(
    name="f",
    image="m",
    slo_ms=200.0,
    max_batch=1,
    min_instances=1,
    max_instances=4,
    instances=2,
)


class Harness:
    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.starter = InProcessStarter(
            clock, lambda order: InProcessModel(latency_ms=constant_ms(EXEC_MS)), start_s=START_S
        )
        server = Server(LOCAL_SERVER, self.starter, CpuAllocator((0, 1, 2, 3)), 4)
        self.pool = WorkerPool(clock, [server], BatchingConfig())
        self.frontend = FunctionFrontDoor(
            functions=self.pool.functions,
            clock=clock,
            observer=Recorder(),
            timeout_s=30.0,
            max_body_bytes=1 << 20,
        )
        self.calls: list[asyncio.Task[list[Outcome]]] = []

    def call(self) -> asyncio.Task[list[Outcome]]:
        """One request through the front door (admitted or refused at once)."""
        call = self.frontend.open("f")
        self.frontend.bind(call, None)
        sample: dict[str, Array] = {"x": np.ones(2, dtype=np.float32)}
        task = asyncio.ensure_future(self.frontend.run(call, [sample]))
        self.calls.append(task)
        return task

    def ready(self) -> list[Instance]:
        return [i for i in self.pool.get("f").router.instances if i.state is InstanceState.READY]

    async def advance(self, seconds: float) -> None:
        for _ in range(round(seconds / 0.005)):
            await self.clock.advance(0.005)


async def test_a_request_waits_for_the_replacement_of_a_dead_worker_not_429() -> None:
    clock = FakeClock()
    harness = Harness(clock)
    harness.pool.deploy(SPEC, Path("/nonexistent/m"), MANIFEST)
    await harness.advance(2 * START_S)
    dying, survivor = harness.ready()
    function = harness.pool.get("f")
    started_s = list(function.health.recent_starts_s)  # measured (in the clock's steps)
    assert started_s == pytest.approx([START_S, START_S], abs=0.006)

    # both workers hold their batches: every request queues, until the next would be late
    for handle in harness.starter.handles.values():
        handle.gate.clear()
    refused = None
    for _ in range(100):
        task = harness.call()
        await asyncio.sleep(0)
        if task.done() and isinstance(task.exception(), Overloaded):
            refused = task
            break
    assert refused is not None, "the two busy instances never filled up"

    harness.starter.handles[dying.worker_id].die()  # SIGKILL, as the pool sees it
    await asyncio.sleep(0)
    replacement = next(i for i in function.router.instances if i.state is InstanceState.STARTING)
    assert replacement.instance_id == dying.instance_id
    assert replacement.expected_ready_s == pytest.approx(clock.now() + max(started_s))
    assert replacement.expected_model is dying.model  # its predecessor's service times

    waiting = harness.call()  # the survivor is full, the replacement will be ready in time
    await asyncio.sleep(0)
    assert not waiting.done()
    assert function.router.waiting == 1

    for handle in harness.starter.handles.values():
        handle.gate.set()
    await harness.advance(START_S)
    for handle in harness.starter.handles.values():
        handle.gate.set()  # the replacement's, too
    await harness.advance(3.0)
    (outcome,) = await asyncio.wait_for(waiting, 1.0)
    assert outcome.instance_id == dying.instance_id  # served by the replacement ...
    assert outcome.cold_start_ms > 0  # ... after waiting for it to start
    answered = [t for t in harness.calls if t.done() and t.exception() is None]
    failed = [t.exception() for t in harness.calls if t.done() and t.exception() is not None]
    assert all(isinstance(e, Overloaded) for e in failed)  # nothing admitted was lost
    assert len(failed) == 1  # only the refusal before the death
    assert len(answered) == len(harness.calls) - 1
    assert survivor.state is InstanceState.READY
    await harness.pool.stop()

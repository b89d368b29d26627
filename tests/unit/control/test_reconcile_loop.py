"""The pool's one reconcile loop, driven through its event queue on a fake clock.

Each test makes something happen (a worker dies, a request finds nothing running, an
instance is no longer wanted, an instance serves a round of batches) and checks two
things: nothing is reconciled until the loop takes the event, and what the loop then does
(requests rerouted, one instance started and the waiting request served, a worker released
once its queue is empty, new batch settings decided). Real pool, router, instances and
queues; in-process workers.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from pathlib import Path

import numpy as np

from infless.cluster.cpus import CpuAllocator
from infless.control import desired
from infless.control import events as ev
from infless.control.instances import batch_settings
from infless.control.pool import WorkerPool
from infless.control.servers import LOCAL_SERVER, Server
from infless.dataplane.config import BatchingConfig
from infless.dataplane.instance import RETUNE_EVERY_BATCHES, Instance, InstanceState
from infless.dataplane.request import Outcome, Pending
from infless.scaling.view import ScalingPlan, StopInstance
from infless.types import FunctionSpec
from tests.support.clock import FakeClock
from tests.support.doubling import DOUBLING_MANIFEST
from tests.support.inprocess import InProcessModel, InProcessStarter
from tests.support.plans import start_instance

START_S = 0.05  # every start takes this long on the fake clock
MANIFEST = DOUBLING_MANIFEST
SPEC = FunctionSpec(
    name="f",
    image="m",
    slo_ms=1000.0,
    max_batch=1,
    min_instances=0,
    max_instances=4,
    instances=2,
)


def state(instance: Instance) -> InstanceState:
    """Its state now (a call, so that a type checker does not narrow it across awaits)."""
    return instance.state


class Harness:
    def __init__(self, clock: FakeClock, model_ms: float = 10.0) -> None:
        self.clock = clock
        self.model_ms = model_ms
        self.starter = InProcessStarter(
            clock,
            lambda order: InProcessModel(latency_ms=lambda b, c: self.model_ms),
            start_s=START_S,
        )
        self.cores = CpuAllocator((0, 1, 2, 3))
        server = Server(LOCAL_SERVER, self.starter, self.cores, 4)
        self.pool = WorkerPool(clock, [server], BatchingConfig())

    def deploy(self, instances: int) -> None:
        self.pool.deploy(replace(SPEC, instances=instances), Path("/nonexistent/m"), MANIFEST)

    def submit(self, value: float = 1.0) -> Pending:
        router = self.pool.get("f").router
        return router.submit({"x": np.array([value, value], dtype=np.float32)})

    def instances(self, state: InstanceState) -> list[Instance]:
        return [i for i in self.pool.get("f").router.instances if i.state is state]

    async def advance(self, seconds: float) -> None:
        """Move fake time in small steps; the loop handles what each step posted."""
        for _ in range(round(seconds / 0.005)):
            await self.clock.advance(0.005)
            await self.pool.settled()

    async def ready(self, count: int) -> list[Instance]:
        await self.advance(2 * START_S)
        ready = self.instances(InstanceState.READY)
        assert len(ready) == count
        return ready


async def test_a_dead_workers_queued_requests_go_to_another_instance() -> None:
    harness = Harness(FakeClock())
    harness.deploy(instances=2)
    first, second = await harness.ready(2)
    handle = harness.starter.handles[first.worker_id]
    handle.gate.clear()  # its batches wait: requests pile up on it
    pendings = [harness.submit(float(v)) for v in range(6)]
    await harness.clock.advance(0.001)
    stuck = first.in_flight + first.queue_length
    assert stuck > 0

    handle.die()  # the starter sees the worker exit: an event, nothing more yet
    assert state(first) is InstanceState.READY
    assert first in harness.pool.get("f").router.instances
    await harness.pool.settled()  # the loop: marked dead, its requests rerouted, replaced
    assert state(first) is InstanceState.DEAD
    assert first not in harness.pool.get("f").router.instances
    (replacement,) = harness.instances(InstanceState.STARTING)
    assert replacement.instance_id == first.instance_id
    assert replacement.worker_id != first.worker_id

    await harness.advance(0.5)
    outcomes: list[Outcome] = [p.future.result() for p in pendings]
    assert [o.outputs["y"][0] for o in outcomes] == [2.0 * v for v in range(6)]
    moved = [o for o in outcomes if o.instance_id == second.instance_id]
    assert len(moved) >= stuck  # every request the dead worker held was served elsewhere
    await harness.pool.stop()


async def test_a_death_the_serving_loop_saw_first_still_records_the_starters_cause() -> None:
    """A batch's socket usually closes before the process watcher reports the exit: the
    instance is already dead (its requests rerouted) when the loop takes `WorkerExited`,
    and the cause only the starter knows (killed for memory) still becomes the function's
    last error."""
    harness = Harness(FakeClock())
    harness.deploy(instances=1)
    (first,) = await harness.ready(1)
    handle = harness.starter.handles[first.worker_id]
    exits: list[bool] = []
    handle.rebind_death(lambda: exits.append(True))  # the watcher's report, held back
    handle.gate.clear()
    pending = harness.submit(1.0)
    await harness.clock.advance(0.001)
    assert first.in_flight == 1

    cause = "killed: out of memory (limit 64 MiB)"
    harness.starter.death_causes[first.worker_id] = cause
    handle.die()
    await harness.advance(0.01)  # the serving loop saw it: dead, its request handed back
    assert state(first) is InstanceState.DEAD
    assert exits == [True]
    assert harness.pool.get("f").health.last_error is None

    harness.pool.post(ev.WorkerExited(function=harness.pool.get("f"), instance=first))
    await harness.pool.settled()
    assert harness.pool.get("f").health.last_error == f"instance {first.instance_id}: {cause}"
    await harness.advance(0.5)
    assert pending.future.result().outputs["y"][0] == 2.0  # served by the replacement
    await harness.pool.stop()


async def test_a_wake_starts_one_instance_and_the_waiting_request_is_served_when_ready() -> None:
    harness = Harness(FakeClock())
    harness.deploy(instances=0)
    await harness.pool.settled()
    assert harness.pool.get("f").router.instances == []

    waiting = [harness.submit(1.0), harness.submit(2.0)]  # both wait; each posts a wake
    assert harness.pool.get("f").router.instances == []  # nothing starts on the request path
    await harness.pool.settled()
    assert len(harness.instances(InstanceState.STARTING)) == 1  # one start for both wakes
    assert harness.starter.boots == 1
    assert not any(p.future.done() for p in waiting)

    await harness.clock.advance(START_S)  # the boot finishes: `BootFinished` is posted
    assert not any(p.future.done() for p in waiting)
    await harness.pool.settled()  # the loop hands the ready instance to the router
    (ready,) = harness.instances(InstanceState.READY)
    await harness.advance(0.1)
    outcomes = [p.future.result() for p in waiting]
    assert [o.instance_id for o in outcomes] == [ready.instance_id] * 2
    assert all(o.cold_start_ms > 0 for o in outcomes)
    assert harness.starter.boots == 1
    await harness.pool.stop()


async def test_a_drained_instances_worker_is_released_once_its_queue_is_empty() -> None:
    harness = Harness(FakeClock())
    harness.deploy(instances=2)
    kept, surplus = await harness.ready(2)
    # scaling down keeps the oldest entry: the second goes
    assert [w.instance_id for w in harness.pool.get("f").desired.instances] == [
        kept.instance_id,
        surplus.instance_id,
    ]
    handle = harness.starter.handles[surplus.worker_id]
    handle.gate.clear()
    pendings = [harness.submit(float(v)) for v in range(4)]
    await harness.clock.advance(0.001)
    held = surplus.in_flight + surplus.queue_length
    assert held > 0

    harness.pool.change("f", partial(desired.scaled, count=1))
    assert state(surplus) is InstanceState.READY  # the change waits for the loop
    await harness.pool.settled()
    assert state(surplus) is InstanceState.DRAINING
    await harness.advance(0.1)
    assert surplus.worker_id in harness.starter.handles  # still serving what it queued
    assert surplus in harness.pool.get("f").router.instances

    handle.gate.set()
    await harness.advance(0.2)
    served_by = [p.future.result().instance_id for p in pendings]
    assert served_by.count(surplus.instance_id) == held  # it answered what it had queued
    assert state(surplus) is InstanceState.DEAD
    assert surplus.worker_id not in harness.starter.handles  # its worker was released
    assert surplus not in harness.pool.get("f").router.instances
    assert sum(harness.cores.load().values()) == 1  # only the kept instance's core
    await harness.pool.stop()


async def test_a_retune_changes_the_batch_settings_the_loop_decided() -> None:
    harness = Harness(FakeClock(), model_ms=10.0)
    harness.deploy(instances=1)
    (instance,) = await harness.ready(1)
    queue = instance.queue
    assert queue is not None
    before = queue.settings
    assert before.exec_ms == 10.0  # from the warm-up

    harness.model_ms = 40.0  # the host got slower: every batch now takes 40 ms
    for _ in range(RETUNE_EVERY_BATCHES - 1):
        pending = harness.submit()
        await harness.advance(0.05)
        assert pending.future.done()
    assert queue.settings == before
    last = harness.submit()  # the 32nd batch: the instance posts `RetuneDue`
    await harness.advance(0.05)
    assert last.future.done()
    assert instance.batches == RETUNE_EVERY_BATCHES

    function = harness.pool.get("f")
    decided = batch_settings(
        BatchingConfig(),
        function.spec,
        instance.exec_ms_by_batch,
        fixed_batch=instance.config.batch_size,
    )
    assert queue.settings == decided
    assert queue.settings.exec_ms > 30.0  # it follows the measured service times
    assert queue.settings != before
    await harness.pool.stop()


async def test_a_start_in_the_pass_that_stops_another_functions_instance_takes_its_core() -> None:
    """One plan stops g's instance (core 1) and starts one of f (whose first is on core 0):
    the new instance goes to the core g's instance drains on, not beside f's — model-less
    vertical scaling hands a retired variant's core to the new target this way. Both
    cores held by live instances afterwards, one each."""
    clock = FakeClock()
    starter = InProcessStarter(
        clock, lambda order: InProcessModel(latency_ms=lambda b, c: 10.0), start_s=START_S
    )
    cores = CpuAllocator((0, 1))
    pool = WorkerPool(
        clock, [Server(LOCAL_SERVER, starter, cores, 2)], BatchingConfig(), autoscaled=True
    )
    for name in ("f", "g"):
        spec = replace(SPEC, name=name, min_instances=1, instances=1)
        pool.deploy(spec, Path(f"/nonexistent/{name}"), MANIFEST)
    for _ in range(20):
        await clock.advance(0.005)
        await pool.settled()
    (kept,) = pool.get("f").router.instances
    (going,) = pool.get("g").router.instances
    assert (kept.cpu_ids, going.cpu_ids) == ((0,), (1,))

    start = start_instance(1, 1, server_id=LOCAL_SERVER, r_low_rps=1.0, r_up_rps=100.0)
    pool.apply(ScalingPlan((start, StopInstance("g", going.instance_id, "zero-demand")), ()))
    await pool.settled()
    new = next(i for i in pool.get("f").router.instances if i is not kept)
    assert new.cpu_ids == (1,)
    for _ in range(40):
        await clock.advance(0.005)
        await pool.settled()
    assert state(going) is InstanceState.DEAD
    assert cores.load() == {0: 1, 1: 1}
    await pool.stop()

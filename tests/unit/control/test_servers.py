"""Many servers under one pool: where uniform instances go, and a server that leaves (its
instances die, their requests are retried, their entries move to the servers that remain)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np

from infless.cluster.cpus import CpuAllocator
from infless.control import desired
from infless.control.functions import FunctionFrontDoor
from infless.control.pool import WorkerPool
from infless.control.servers import Server, choose_server
from infless.dataplane.config import BatchingConfig
from infless.dataplane.instance import InstanceState
from infless.dataplane.request import Array
from infless.scaling.view import ServerView
from tests.support.clock import FakeClock
from tests.support.frontend import Recorder
from tests.support.inprocess import InProcessModel, InProcessStarter
from tests.unit.control.test_control_plane import MANIFEST, SPEC


def view(server_id: str, free: int, affinity: float = 0.0) -> ServerView:
    return ServerView(server_id, 2, free, affinity={"f": affinity} if affinity else {})


def test_a_uniform_instance_goes_where_there_is_room_then_where_the_function_runs_least() -> None:
    servers = [view("a", 0, affinity=1.0), view("b", 1), view("c", 2)]
    assert choose_server(servers, "f", 1, {}) == "c"  # room first, then the most free cores
    assert choose_server(servers, "f", 1, {"c": 1}) == "b"  # spread over running ones
    assert choose_server(servers, "f", 2, {"c": 1}) == "c"  # only c has room for two cores
    full = [view("a", 0, affinity=0.5), view("b", 0)]
    assert choose_server(full, "f", 1, {}) == "a"  # no room anywhere: the tensors decide
    assert choose_server(full, "f", 1, {"a": 2, "b": 1}) == "b"
    assert choose_server([], "f", 1, {}) is None


def test_entries_on_a_server_that_left_move_with_their_shape_and_a_new_id() -> None:
    from tests.unit.control.test_desired import Mint, start

    mint = Mint()
    state = desired.planned(
        desired.DesiredState(desired.Owner.AUTOSCALER), mint, actions=[start(4, 2)]
    )
    (entry,) = state.instances
    assert entry.server_id == "s1"
    moved = desired.relocated(state, mint, servers={"s2"})
    (after,) = moved.instances
    assert (after.server_id, after.config) == ("s2", entry.config)
    assert after.instance_id != entry.instance_id
    assert desired.relocated(moved, mint, servers={"s2"}) == moved  # nothing to move


def three_servers(clock: FakeClock) -> WorkerPool:
    servers = [
        Server(
            f"s{i}",
            InProcessStarter(clock, lambda order: InProcessModel(latency_ms=lambda b, c: 5.0)),
            CpuAllocator((0,)),
            1,
        )
        for i in range(3)
    ]
    return WorkerPool(clock, servers, BatchingConfig())


async def settle(clock: FakeClock, seconds: float = 1.0) -> None:
    for _ in range(int(seconds / 0.01)):
        await clock.advance(0.01)


async def test_a_server_that_leaves_loses_no_request_and_its_instances_come_back_elsewhere() -> (
    None
):
    clock = FakeClock()
    pool = three_servers(clock)
    frontend = FunctionFrontDoor(
        functions=pool.functions,
        clock=clock,
        observer=Recorder(),
        timeout_s=5.0,
        max_body_bytes=1 << 20,
    )
    pool.deploy(SPEC, Path("/nonexistent/m"), MANIFEST)
    pool.change("f", lambda state, mint: desired.scaled(state, mint, count=3))
    await settle(clock)
    function = pool.get("f")
    ready = [i for i in function.router.instances if i.state is InstanceState.READY]
    assert sorted(i.server_id for i in ready) == ["s0", "s1", "s2"]  # spread, one each

    calls = []
    for value in range(30):
        call = frontend.open("f")
        frontend.bind(call, None)
        sample: dict[str, Array] = {"x": np.array([value, value], dtype=np.float32)}
        calls.append(asyncio.ensure_future(frontend.run(call, [sample])))
    await clock.advance(0.001)  # every instance has a batch in flight
    pool.remove_server("s1", "test")
    await settle(clock)
    outcomes = [o for c in calls for o in await c]
    assert all(o.outputs is not None for o in outcomes)  # answered, retried elsewhere
    assert [o.outputs["y"][0] for o in outcomes if o.outputs] == [2.0 * v for v in range(30)]

    assert sorted(pool.servers) == ["s0", "s2"]
    assert {w.server_id for w in function.desired.instances} == {"s0", "s2"}
    assert function.desired.count == 3  # the capacity is back, on the remaining servers
    ready = [i for i in function.router.instances if i.state is InstanceState.READY]
    assert len(ready) == 3
    assert {i.server_id for i in ready} == {"s0", "s2"}
    await pool.stop()


def _gpu_server(clock: FakeClock, server_id: str, gpus: tuple[int, ...], default: int) -> Server:
    return Server(
        server_id,
        InProcessStarter(clock),
        CpuAllocator((0, 1)),
        4,
        gpu_pct=gpus,
        default_gpu_pct=default,
    )


async def test_an_unplanned_instance_takes_the_default_share_on_the_freest_gpu() -> None:
    from dataclasses import replace

    clock = FakeClock()
    pool = WorkerPool(clock, [_gpu_server(clock, "g", (100, 100), 50)], BatchingConfig())
    pool.deploy(replace(SPEC, instances=3), Path("/nonexistent/m"), MANIFEST)
    entries = pool.get(SPEC.name).desired.instances
    # 50 % each, spread: device 0, then device 1 (more free), then device 0 again
    assert [(w.gpu_index, w.config.gpu_pct) for w in entries] == [(0, 50), (1, 50), (0, 50)]
    await pool.stop()


async def test_a_function_says_its_share_or_cpu_only() -> None:
    from dataclasses import replace

    clock = FakeClock()
    pool = WorkerPool(clock, [_gpu_server(clock, "g", (100,), 50)], BatchingConfig())
    pool.deploy(replace(SPEC, name="thirty", gpu_pct=30), Path("/nonexistent/a"), MANIFEST)
    pool.deploy(replace(SPEC, name="cpu", gpu_pct=0), Path("/nonexistent/b"), MANIFEST)
    (thirty,) = pool.get("thirty").desired.instances
    (cpu,) = pool.get("cpu").desired.instances
    assert (thirty.gpu_index, thirty.config.gpu_pct) == (0, 30)
    assert (cpu.gpu_index, cpu.config.gpu_pct) == (None, 0)
    await pool.stop()


async def test_without_gpus_an_instance_runs_on_cpu_cores_whatever_it_asks() -> None:
    from dataclasses import replace

    clock = FakeClock()
    pool = WorkerPool(clock, [_gpu_server(clock, "c", (), 0)], BatchingConfig())
    pool.deploy(replace(SPEC, gpu_pct=30), Path("/nonexistent/m"), MANIFEST)
    (entry,) = pool.get(SPEC.name).desired.instances
    assert (entry.gpu_index, entry.config.gpu_pct) == (None, 0)
    await pool.stop()

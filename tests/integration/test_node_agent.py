"""A node agent without Ray: it starts real workers that serve the gateway over TCP with the
token it hands out, ships packages by digest, and adopts its store when it starts again."""

from __future__ import annotations

import asyncio
import shutil
import socket
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import numpy as np
import psutil
import pytest

from infless.config import Config, with_overrides
from infless.nodes import wire
from infless.nodes.agent import NodeAgent
from infless.nodes.remote import RemoteStarter
from infless.types import InstanceConfig
from infless.workers import protocol as p
from infless.workers.handle import RemoteWorkerHandle, connect_tcp
from infless.workers.starting import BootOrder
from tests.support.gateway import TEST_MODEL_REPOSITORY

MODEL = TEST_MODEL_REPOSITORY / "mnist"


@pytest.fixture
def node_config() -> tuple[Config, Path]:
    base = Path(tempfile.mkdtemp(prefix="infless-node-test-", dir="/dev/shm"))
    config = with_overrides(
        Config(),
        state={"dir": str(base / "state")},
        store={"root": str(base / "store")},
        cluster={"node_dir": str(base / "nodes")},
        batching={"warmup_rounds": 1},
    )
    return config, base


@pytest.fixture
async def agent(node_config: tuple[Config, Path]) -> AsyncIterator[NodeAgent]:
    config, base = node_config
    node = NodeAgent(msgspec.json.encode(config), "a" * 24, "127.0.0.1", [0])
    yield node
    await node.close()
    shutil.rmtree(base, ignore_errors=True)


def order(instance_id: str, deaths: list[str] | None = None) -> BootOrder:
    return BootOrder(
        instance_id=instance_id,
        tenant="t",
        package_dir=MODEL,
        config=InstanceConfig(2, 1),
        cpu_ids=(0,),
        warmup_batch_sizes=(1, 2),
        on_death=lambda: deaths.append(instance_id) if deaths is not None else None,
        function="mnist",
        instance=instance_id,
    )


def digits(count: int) -> dict[str, p.TensorData]:
    data = np.random.default_rng(0).standard_normal((count, 1, 28, 28)).astype(np.float32)
    return {"image": p.TensorData("float32", list(data.shape), data.tobytes())}


async def until(predicate: object, what: str, timeout_s: float = 20.0) -> None:
    assert callable(predicate)
    for _ in range(int(timeout_s / 0.05)):
        if predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def test_a_worker_started_by_the_agent_serves_the_gateway_over_tcp(
    agent: NodeAgent,
) -> None:
    starter = RemoteStarter(agent, "nodea")
    await starter.start()
    deaths: list[str] = []
    booted = await starter.boot(order("w1", deaths))
    handle = booted.handle
    assert isinstance(handle, RemoteWorkerHandle)
    assert set(booted.ready.exec_ms) == {1, 2}
    result = await handle.run_batch(digits(2))
    assert result.outputs["probabilities"].shape == [2, 10]
    report = await starter.refresh()
    assert report.workers == ["w1"]
    assert report.packages == 1
    assert report.store_tensors > 0
    assert report.store_tenant_bytes == {"t": report.store_bytes}  # what the board shows
    assert report.similarity == {f"t/{starter._digests[MODEL]}": 1.0}
    assert starter.affinities([]) == {}
    # the worker is on this machine here: its pid is real, and it listens no more
    worker = psutil.Process(handle.pid)
    assert not [c for c in worker.net_connections("tcp") if c.status == psutil.CONN_LISTEN]

    handle.kill()  # through the agent: the gateway does not own remote pids
    await until(lambda: deaths == ["w1"], "the gateway to see the worker die")
    assert not handle.alive
    await starter.release("w1")
    assert wire.decode_report(await agent.report()).workers == []


async def test_a_connection_without_the_token_is_refused_and_the_right_one_served(
    agent: NodeAgent,
) -> None:
    starter = RemoteStarter(agent, "nodea")
    digest = await starter._ship(MODEL)
    start = wire.StartOrder(
        instance_id="w2",
        tenant="t",
        package=digest,
        batch_size=1,
        cpus=1,
        cpu_ids=[0],
        warmup_batch_sizes=[1],
    )
    started = wire.decode_started(await agent.start(wire.encode(start)))
    wrong = await connect_tcp(started.host, started.port, b"x" * 32, 5.0)
    loop = asyncio.get_running_loop()
    assert await asyncio.wait_for(loop.sock_recv(wrong, 16), 10.0) == b""  # closed on us
    wrong.close()
    right = await connect_tcp(started.host, started.port, started.token, 5.0)
    right.setblocking(True)
    right.sendall(p.encode_frame(p.Ping(7)))
    header = right.recv(p.FRAME_HEADER.size, socket.MSG_WAITALL)
    body = right.recv(p.frame_length(header), socket.MSG_WAITALL)
    assert p.decode_from_worker(body) == p.Pong(7, msgspec.msgpack.decode(body)["rss_bytes"])
    with pytest.raises(ConnectionRefusedError):  # no more listening once the gateway came
        await connect_tcp(started.host, started.port, started.token, 2.0)
    right.close()
    await agent.release("w2")


async def test_workers_exit_with_their_agent_and_a_new_agent_adopts_the_store(
    node_config: tuple[Config, Path],
) -> None:
    config, base = node_config
    config = with_overrides(config, store={"clear_on_shutdown": False})  # as after a crash
    first = NodeAgent(msgspec.json.encode(config), "b" * 24, "127.0.0.1", [0])
    starter = RemoteStarter(first, "nodeb")
    deaths: list[str] = []
    booted = await starter.boot(order("w3", deaths))
    pid = booted.handle.pid
    await first.close()  # its workers go with it; the store's files stay
    await until(lambda: not psutil.pid_exists(pid), "the worker to exit with its agent")
    await until(lambda: deaths == ["w3"], "the gateway to see the worker die")

    second = NodeAgent(msgspec.json.encode(config), "b" * 24, "127.0.0.1", [0])
    try:
        report = wire.decode_report(await second.report())
        assert report.agent_starts == 2
        assert report.adopted_tensors > 0
        assert report.workers == []
        assert report.packages == 1  # shipped packages stay too: no second transfer
        assert await second.has_package(starter._digests[MODEL])
    finally:
        await second.close()
        shutil.rmtree(base, ignore_errors=True)

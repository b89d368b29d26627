"""End to end on one server: publish a zoo model, fork workers from the zygote, attach, serve."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import numpy as np
import pytest

from infless.clock import RealClock
from infless.weights.store import TensorStore
from infless.workers import protocol as p
from infless.workers.launcher import LaunchedWorker
from infless.workers.zygote import ZygoteLauncher
from tests.support.gateway import REPO_ROOT, TEST_MODEL_REPOSITORY

MODEL = TEST_MODEL_REPOSITORY / "resnet-20"


@pytest.fixture
def store() -> Iterator[TensorStore]:
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
    directory = Path(tempfile.mkdtemp(prefix="infless-test-store-", dir=base))
    tensor_store = TensorStore(directory / "store", RealClock(), keepalive_s=0.0)
    yield tensor_store
    tensor_store.close()
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
async def zygote() -> AsyncIterator[ZygoteLauncher]:
    launcher = ZygoteLauncher(env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"})
    yield launcher
    await launcher.close()


def maps_file(pid: int, path: str) -> bool:
    return path in Path(f"/proc/{pid}/maps").read_text()


async def exchange(worker: LaunchedWorker, message: p.ToWorker) -> p.FromWorker:
    loop = asyncio.get_running_loop()
    await loop.sock_sendall(worker.sock, p.encode_frame(message))
    header = b""
    while len(header) < p.FRAME_HEADER.size:
        header += await loop.sock_recv(worker.sock, p.FRAME_HEADER.size - len(header))
    body = b""
    while len(body) < p.frame_length(header):
        chunk = await loop.sock_recv(worker.sock, p.frame_length(header) - len(body))
        assert chunk, "the worker closed its socket"
        body += chunk
    return p.decode_from_worker(body)


async def test_workers_forked_from_the_zygote_serve_from_the_store(
    store: TensorStore, zygote: ZygoteLauncher
) -> None:
    batch = np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32)
    run = p.RunBatch(1, {"image": p.TensorData("float32", list(batch.shape), batch.tobytes())})
    workers: list[LaunchedWorker] = []
    outputs = []
    try:
        for i, shared in enumerate([True, True, False]):
            stored = await asyncio.to_thread(store.publish, MODEL, "t", holder=f"i{i}")
            worker = await zygote.launch(f"i{i}")
            workers.append(worker)
            worker.sock.setblocking(False)
            load = p.LoadModel(str(MODEL), cpus=1, store_tensors=stored if shared else None)
            ready = await exchange(worker, load)
            assert isinstance(ready, p.Ready), ready
            assert ready.pid == worker.pid
            assert maps_file(worker.pid, stored[0].path) == shared  # zero-copy: mapped file
            result = await exchange(worker, run)
            assert isinstance(result, p.BatchResult), result
            outputs.append(result.outputs["probabilities"].data)
        assert outputs[0] == outputs[1] == outputs[2]  # same answers as a private load
    finally:
        loop = asyncio.get_running_loop()
        for worker in workers:
            await loop.sock_sendall(worker.sock, p.encode_frame(p.Shutdown()))
            assert await zygote.wait_exit(worker.pid) == 0
            worker.sock.close()
    assert store.resident_bytes() > 0
    freed = store.reclaim([], RealClock().now())  # every instance is gone: all reclaimable
    assert sum(e.size_bytes for e in freed) == store.index_package(MODEL).unique_bytes
    assert store.resident_bytes() == 0

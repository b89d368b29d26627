"""End to end on one server: publish a zoo model, fork workers from the zygote, attach, serve."""

from __future__ import annotations

import asyncio

import numpy as np

from infless.clock import RealClock
from infless.weights.store import TensorStore
from infless.workers import protocol as p
from infless.workers.launcher import LaunchedWorker
from infless.workers.zygote import ZygoteLauncher
from tests.support.gateway import TEST_MODEL_REPOSITORY
from tests.support.workers import exchange, maps_file

MODEL = TEST_MODEL_REPOSITORY / "resnet-20"


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

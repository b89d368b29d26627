"""The no-sharing baseline: `LoadModel.private_weights` copies package weights into the worker.

Without it, package weights stay memory-mapped from the safetensors file (page cache shared
by every worker of the package); with it, the worker holds an anonymous private copy and
does not map the file at all — the replica memory bench.memory compares the store against.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from infless.config import parse_config
from infless.errors import ConfigError
from infless.workers import protocol as p
from infless.workers.launcher import LaunchedWorker
from infless.workers.zygote import ZygoteLauncher
from tests.support.gateway import TEST_MODEL_REPOSITORY
from tests.support.workers import exchange

MODEL = TEST_MODEL_REPOSITORY / "resnet-20"
WEIGHTS = str((MODEL / "weights.safetensors").resolve())


def maps_weights(pid: int) -> bool:
    return WEIGHTS in Path(f"/proc/{pid}/maps").read_text()


def private_dirty_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Private_Dirty:"):
            return int(line.split()[1])
    raise AssertionError("no Private_Dirty in smaps_rollup")


async def test_private_weights_are_copied_out_of_the_package_mapping(
    zygote: ZygoteLauncher,
) -> None:
    batch = np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32)
    run = p.RunBatch(1, {"image": p.TensorData("float32", list(batch.shape), batch.tobytes())})
    workers: list[LaunchedWorker] = []
    outputs: list[bytes] = []
    try:
        for i, private in enumerate([False, True]):
            worker = await zygote.launch(f"i{i}")
            workers.append(worker)
            worker.sock.setblocking(False)
            load = p.LoadModel(str(MODEL), cpus=1, private_weights=private)
            ready = await exchange(worker, load)
            assert isinstance(ready, p.Ready), ready
            result = await exchange(worker, run)
            assert isinstance(result, p.BatchResult), result
            outputs.append(result.outputs["probabilities"].data)
            assert maps_weights(worker.pid) is not private  # private: the file is no longer mapped
        assert outputs[0] == outputs[1]  # same answers
        weights_kib = (MODEL / "weights.safetensors").stat().st_size // 1024
        dirty_kib = [private_dirty_kib(w.pid) for w in workers]
        assert dirty_kib[1] - dirty_kib[0] > weights_kib // 2  # the copy is private memory
    finally:
        loop = asyncio.get_running_loop()
        for worker in workers:
            await loop.sock_sendall(worker.sock, p.encode_frame(p.Shutdown()))
            assert await zygote.wait_exit(worker.pid) == 0
            worker.sock.close()


def test_private_weights_requires_the_store_disabled() -> None:
    with pytest.raises(ConfigError, match="private_weights"):
        parse_config({"store": {"private_weights": True}})
    config = parse_config({"store": {"enabled": False, "private_weights": True}})
    assert config.store.private_weights

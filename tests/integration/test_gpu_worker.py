"""GPU workers on the fake device, as real processes forked from the zygote: standby, loading
onto the device (store tensors, or the tier's copy), graphs, answers equal to the CPU path's,
unload and another model, a placement that does not match."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import numpy as np
import pytest

from infless.weights.attach import attach
from infless.weights.gpu_tier import SharedModel
from infless.weights.package_index import ELEMENT_BYTES
from infless.weights.store import TensorStore
from infless.weights.stored import StoredTensor
from infless.workers import protocol as p
from infless.workers.handle import ProcessWorkerHandle, WorkerStartFailed
from infless.workers.zygote import ZygoteLauncher
from tests.support.gateway import TEST_MODEL_REPOSITORY
from tests.support.gpu_tier_files import write_fake_shared_model
from tests.support.gpu_workers import (
    answers,
    assert_same_answers,
    cpu_answers,
    fork,
    image_batch,
    probabilities,
    workers,
)
from tests.support.workers import maps_file

MNIST = TEST_MODEL_REPOSITORY / "mnist"
TEXTCNN = TEST_MODEL_REPOSITORY / "textcnn-69"
FAKE = p.GpuPlacement("fake", "fake-0", index=0, gpu_pct=30)
TIMEOUT_S = 60.0
# The fake device computes on the CPU with the same kernels; a batch padded to a graph's size
# may still round differently, so answers are compared to float32 rounding.
ATOL = 1e-6
__all__ = ["workers"]  # the fixture


def images(rows: int, seed: int) -> dict[str, p.TensorData]:
    return image_batch(rows, (1, 28, 28), seed)


def tokens(rows: int, seed: int) -> dict[str, p.TensorData]:
    ids = np.random.default_rng(seed).integers(0, 1000, (rows, 69), dtype=np.int64)
    return {"token_ids": p.TensorData("int64", list(ids.shape), ids.tobytes())}


def gpu_load(
    package: Path,
    store_tensors: list[StoredTensor] | None = None,
    gpu_weights: SharedModel | None = None,
) -> p.LoadModel:
    return p.LoadModel(
        str(package), cpus=1, warmup_batch_sizes=[1, 4], warmup_rounds=1,
        store_tensors=store_tensors, gpu=FAKE, gpu_weights=gpu_weights,
    )  # fmt: skip


async def test_a_fake_gpu_worker_stands_by_serves_unloads_and_serves_another_model(
    store: TensorStore, zygote: ZygoteLauncher, workers: list[ProcessWorkerHandle], tmp_path: Path
) -> None:
    mnist = await asyncio.to_thread(store.publish, MNIST, "t", holder="cpu")
    batches = {n: images(n, seed=n) for n in (1, 3, 4, 5)}  # 3: padded to 4; 5: eager
    cpu = await fork(zygote, workers, "cpu")
    await cpu.load(p.LoadModel(str(MNIST), cpus=1, store_tensors=mnist), TIMEOUT_S)
    wanted = await answers(cpu, batches)

    gpu = await fork(zygote, workers, "gpu")
    standby = await gpu.standby(p.Standby(FAKE), TIMEOUT_S)
    assert (standby.pid, standby.device_name) == (gpu.pid, "infless fake GPU")
    ready = await gpu.load(gpu_load(MNIST, store_tensors=mnist), TIMEOUT_S)
    assert ready.gpu is not None
    assert ready.gpu.device_name == "infless fake GPU"
    assert ready.gpu.graph_batch_sizes == [1, 4]  # the fake device keeps every graph
    assert not ready.gpu.weights_from_tier
    assert set(ready.exec_ms) == {1, 4}
    assert_same_answers(await answers(gpu, batches), wanted, ATOL)
    weights_bytes = sum(math.prod(t.shape) * ELEMENT_BYTES[t.dtype] for t in mnist)
    assert (await gpu.ping(TIMEOUT_S)).gpu_memory_bytes == weights_bytes  # a private copy

    again = await gpu.unload(TIMEOUT_S)
    assert (again.pid, again.init_ms) == (gpu.pid, 0.0)
    assert (await gpu.ping(TIMEOUT_S)).gpu_memory_bytes == 0

    state = attach(mnist)  # the tier's copy is made from the host tier, the store
    shared = await asyncio.to_thread(write_fake_shared_model, state, tmp_path / "mnist.tier")
    ready = await gpu.load(gpu_load(MNIST, gpu_weights=shared), TIMEOUT_S)
    assert ready.gpu is not None
    assert ready.gpu.weights_from_tier
    assert ready.gpu.graph_batch_sizes == [1, 4]
    assert maps_file(gpu.pid, str(tmp_path / "mnist.tier"))  # the tier's copy, not a copy of it
    assert_same_answers(await answers(gpu, batches), wanted, ATOL)
    assert (await gpu.ping(TIMEOUT_S)).gpu_memory_bytes == 0  # the holder's, not this worker's

    await gpu.unload(TIMEOUT_S)
    textcnn = await asyncio.to_thread(store.publish, TEXTCNN, "t", holder="gpu")
    ready = await gpu.load(gpu_load(TEXTCNN, store_tensors=textcnn), TIMEOUT_S)
    assert ready.gpu is not None
    assert ready.gpu.graph_batch_sizes == [1, 4]
    token_batches = {n: tokens(n, seed=10 + n) for n in (2, 3)}
    expected = await asyncio.to_thread(cpu_answers, TEXTCNN, token_batches)
    assert_same_answers(await answers(gpu, token_batches), expected, ATOL)


async def test_a_load_must_name_the_standbys_placement(
    zygote: ZygoteLauncher, workers: list[ProcessWorkerHandle]
) -> None:
    gpu = await fork(zygote, workers, "gpu")
    await gpu.standby(p.Standby(FAKE), TIMEOUT_S)
    assert (await gpu.unload(TIMEOUT_S)).init_ms == 0.0  # standing by already: it says so
    elsewhere = p.GpuPlacement("fake", "fake-1", index=1, gpu_pct=30)
    with pytest.raises(WorkerStartFailed, match="PlacementMismatch"):
        await gpu.load(p.LoadModel(str(MNIST), cpus=1, gpu=elsewhere), TIMEOUT_S)


async def test_a_fresh_worker_loads_onto_its_device_without_a_standby(
    store: TensorStore, zygote: ZygoteLauncher, workers: list[ProcessWorkerHandle]
) -> None:
    mnist = await asyncio.to_thread(store.publish, MNIST, "t", holder="gpu")
    gpu = await fork(zygote, workers, "gpu")
    ready = await gpu.load(gpu_load(MNIST, store_tensors=mnist), TIMEOUT_S)
    assert ready.gpu is not None
    assert ready.gpu.device_name == "infless fake GPU"
    result = await gpu.run_batch(images(2, seed=0))
    assert probabilities(result).shape == (2, 10)

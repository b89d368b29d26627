"""GPU workers on a real CUDA device (skipped without one): a standby at a 30 % share,
time-sliced (no MPS daemon); fp32 and bf16 answers against the CPU path's; the GPU tier's
copy opened over CUDA IPC on the worker's own ordinal; Unload and another model; CUDA graphs
captured for fixed shapes and replayed through pinned buffers.

Tolerances, on softmax probabilities: fp32 atol 1e-4 (the worker computes fp32 in IEEE fp32:
no TF32); the bf16 variant atol 3e-2 (bf16 against fp32 differs by up to ~7e-3 on these
models on the CPU itself).
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
import torch

from infless.models.loader import load_model
from infless.models.package import MANIFEST_FILE, encode_manifest, load_manifest
from infless.weights.attach import attach
from infless.weights.gpu_cuda import CudaDevice
from infless.weights.store import TensorStore
from infless.workers import protocol as p
from infless.workers.gpu_model import DeviceModel
from infless.workers.gpu_runtime import FAKE_DEVICE_NAME, CudaGraph, CudaRuntime
from infless.workers.handle import ProcessWorkerHandle
from infless.workers.zygote import ZygoteLauncher
from tests.support.gpu_workers import (
    answers,
    assert_same_answers,
    cpu_answers,
    fork,
    image_batch,
    workers,
)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
__all__ = ["workers"]  # the fixture

TIMEOUT_S = 120.0  # a first CUDA context and cuDNN's kernel choices take seconds
FP32_ATOL = 1e-4
BF16_ATOL = 3e-2
MNIST_SHAPE = (1, 28, 28)
RESNET_SHAPE = (3, 32, 32)


def placement() -> p.GpuPlacement:
    """Device 0 of this process, by uuid, at a 30 % share, time-sliced."""
    uuid = str(torch.cuda.get_device_properties(0).uuid)
    uuid = uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"
    return p.GpuPlacement("cuda", uuid, index=0, gpu_pct=30, mps_pipe_dir=None)


def gpu_load(package: Path, **fields: object) -> p.LoadModel:
    load = p.LoadModel(
        str(package), cpus=2, warmup_batch_sizes=[1, 4], warmup_rounds=3, gpu=placement()
    )
    return msgspec.structs.replace(load, **fields)


@pytest.fixture
def held_copies() -> Iterator[list[object]]:
    """Device copies this process holds for workers (the GPU tier's holder, here)."""
    copies: list[object] = []
    yield copies
    device = CudaDevice(0)
    for copy in copies:
        device.free(copy)


async def test_a_cuda_worker_answers_like_the_cpu_path_and_serves_another_model(
    built_models: Path,
    store: TensorStore,
    zygote: ZygoteLauncher,
    workers: list[ProcessWorkerHandle],
    held_copies: list[object],
) -> None:
    resnet, mnist = built_models / "resnet-20", built_models / "mnist"
    stored = await asyncio.to_thread(store.publish, resnet, "t", holder="cpu")
    batches = {n: image_batch(n, RESNET_SHAPE, seed=n) for n in (1, 3, 4, 6)}  # 3: pad; 6: eager
    cpu = await fork(zygote, workers, "cpu")
    await cpu.load(p.LoadModel(str(resnet), cpus=4, store_tensors=stored), TIMEOUT_S)
    wanted = await answers(cpu, batches)

    gpu = await fork(zygote, workers, "gpu")
    standby = await gpu.standby(p.Standby(placement()), TIMEOUT_S)
    assert standby.device_name not in {"", FAKE_DEVICE_NAME}
    assert standby.memory_bytes > 0  # the warmed libraries' allocations, cached
    ready = await gpu.load(gpu_load(resnet, store_tensors=stored), TIMEOUT_S)
    assert ready.gpu is not None
    assert ready.gpu.device_name == standby.device_name
    assert set(ready.gpu.graph_batch_sizes) <= {1, 4}  # kept where replay measured faster
    assert not ready.gpu.weights_from_tier
    assert ready.gpu.memory_bytes > 0
    assert set(ready.exec_ms) == {1, 4}
    assert_same_answers(await answers(gpu, batches), wanted, FP32_ATOL)
    assert (await gpu.ping(TIMEOUT_S)).gpu_memory_bytes > 0

    assert (await gpu.unload(TIMEOUT_S)).init_ms == 0.0
    device = CudaDevice(0)  # the tier's holder: this process
    copy = device.upload("mnist", attach(await asyncio.to_thread(store.publish, mnist, "t")))
    held_copies.append(copy)
    ready = await gpu.load(gpu_load(mnist, gpu_weights=device.export(copy)), TIMEOUT_S)
    assert ready.gpu is not None
    assert ready.gpu.weights_from_tier
    mnist_batches = {n: image_batch(n, MNIST_SHAPE, seed=20 + n) for n in (2, 5)}
    expected = await asyncio.to_thread(cpu_answers, mnist, mnist_batches)
    assert_same_answers(await answers(gpu, mnist_batches), expected, FP32_ATOL)
    assert (await gpu.ping(TIMEOUT_S)).gpu_memory_bytes > 0
    await gpu.unload(TIMEOUT_S)  # the tier's views closed before the holder frees its copy


async def test_a_bf16_variant_on_the_device_answers_close_to_fp32(
    built_models: Path,
    zygote: ZygoteLauncher,
    workers: list[ProcessWorkerHandle],
    tmp_path: Path,
) -> None:
    variant = tmp_path / "mnist-bf16"
    shutil.copytree(built_models / "mnist", variant)
    manifest = msgspec.structs.replace(load_manifest(variant), name="mnist-bf16", transform="bf16")
    (variant / MANIFEST_FILE).write_bytes(encode_manifest(manifest))
    batches = {n: image_batch(n, MNIST_SHAPE, seed=30 + n) for n in (1, 3, 6)}
    wanted = await asyncio.to_thread(cpu_answers, built_models / "mnist", batches)
    gpu = await fork(zygote, workers, "gpu")
    ready = await gpu.load(gpu_load(variant), TIMEOUT_S)  # a fresh start: no standby first
    assert ready.gpu is not None
    assert_same_answers(await answers(gpu, batches), wanted, BF16_ATOL)


def test_graphs_replay_padded_batches_as_eager_runs_them(built_models: Path) -> None:
    runtime = CudaRuntime()
    runtime.warm_up_libraries()
    manifest, module = load_model(built_models / "mnist")
    model = DeviceModel(manifest, runtime.to_device(module), None, runtime, False)
    captured = model.capture_batch(4)
    assert isinstance(captured.graph, CudaGraph)
    model.keep_graph(captured)
    batch = model.input_arrays(image_batch(3, MNIST_SHAPE, seed=7))
    replayed = model.forward(batch)["probabilities"]  # padded to 4, sliced to 3
    eager = model.forward_eager(batch)["probabilities"]
    assert replayed.shape == eager.shape == (3, 10)
    torch.testing.assert_close(
        torch.from_numpy(replayed), torch.from_numpy(eager), rtol=0, atol=1e-5
    )
    assert all(buffer.is_pinned() for buffer in model._staging._buffers.values())

"""The GPU tier on a real GPU (skipped without CUDA): the holder uploads a model from the tensor
store to device 0, fresh processes open it by CUDA IPC (`gpu_cuda.open_shared`) and read back
exactly the host tensors, and evicting a model hands its device memory back to the driver."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import msgspec
import numpy as np
import pytest

from infless.clock import RealClock
from infless.cluster.gpus import discover_gpus
from infless.weights.gpu_holder import GpuTierClient, model_key_of
from infless.weights.gpu_tier import CudaIpcHandle, SharedModel, plan_layout
from infless.weights.store import TensorStore
from infless.weights.stored import StoredTensor
from tests.unit.weights.packages import write_package

REPO_ROOT = Path(__file__).resolve().parents[2]
MIB = 1 << 20


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not _cuda_available(), reason="needs a CUDA GPU"),
]

# A fresh process, as a GPU worker is: it sees only the holder's GPU (as cuda:0), opens the
# shared copy and compares every tensor with the store's host copy.
OPENER = """
import json, sys
import msgspec, torch
from infless.weights.attach import attach
from infless.weights.gpu_cuda import open_shared
from infless.weights.gpu_tier import SharedModel
from infless.weights.stored import StoredTensor
shared = msgspec.msgpack.decode(bytes.fromhex(sys.argv[1]), type=SharedModel)
stored = msgspec.msgpack.decode(bytes.fromhex(sys.argv[2]), type=list[StoredTensor])
device = open_shared(shared, 0)
host = attach(stored)
print(json.dumps({
    "equal": {name: bool(torch.equal(device[name].cpu(), host[name])) for name in host},
    "devices": sorted({str(t.device) for t in device.values()}),
    "dtypes": {name: str(t.dtype) for name, t in device.items()},
}))
"""


def first_gpu() -> tuple[int, str, int]:
    """NVML index, uuid and total memory of the first GPU (torch's view without NVML)."""
    inventory = discover_gpus()
    if inventory.devices:
        gpu = inventory.devices[0]
        return gpu.index, gpu.uuid, gpu.memory_total_bytes
    import torch

    props = torch.cuda.get_device_properties(0)
    return 0, f"GPU-{props.uuid}", int(props.total_memory)


def model(seed: int) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """64 MiB of float32 (a segment of its own in the caching allocator) and small tensors of
    other dtypes (bfloat16 stored from uint16 bits)."""
    rng = np.random.default_rng(seed)
    arrays: dict[str, np.ndarray] = {
        "proj.weight": rng.standard_normal((4096, 4096)).astype(np.float32),
        "proj.bias": rng.standard_normal(4096).astype(np.float32),
        "scale": rng.integers(0, 1 << 15, 33).astype(np.uint16),
        "half": rng.standard_normal((7, 3)).astype(np.float16),
        "steps": np.array(seed, dtype=np.int64),
    }
    return arrays, {"scale": "BF16"}


def device_bytes(tensors: list[StoredTensor]) -> int:
    return plan_layout((t.name, t.dtype, t.shape) for t in tensors)[1]


@pytest.fixture
def store() -> Iterator[TensorStore]:
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
    directory = Path(tempfile.mkdtemp(prefix="infless-gpu-tier-", dir=base))
    tensor_store = TensorStore(directory / "store", RealClock(), keepalive_s=0.0)
    yield tensor_store
    tensor_store.close()
    shutil.rmtree(directory, ignore_errors=True)


def open_in_child(shared: SharedModel, tensors: list[StoredTensor], uuid: str) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "CUDA_VISIBLE_DEVICES": uuid}
    env.pop("CUDA_MPS_PIPE_DIRECTORY", None)
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            OPENER,
            msgspec.msgpack.encode(shared).hex(),
            msgspec.msgpack.encode(tensors).hex(),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


async def test_instances_open_the_holders_copy_and_eviction_frees_the_device(
    store: TensorStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))
    index, uuid, total_bytes = first_gpu()
    tensors: dict[str, list[StoredTensor]] = {}
    for name, seed in (("a", 1), ("b", 2)):
        arrays, codes = model(seed)
        package = write_package(tmp_path / name, arrays, codes)
        tensors[name] = await asyncio.to_thread(store.publish, package, "tenant")
    size_bytes = device_bytes(tensors["a"])
    assert size_bytes >= 64 * MIB
    # room for one model and a half: a second model evicts the first (once it is idle)
    client = GpuTierClient(
        "cuda", [(index, uuid)], 1.5 * size_bytes / total_bytes, RealClock(), start_timeout_s=180
    )
    await client.start()
    try:
        await client.refresh()
        baseline = client.memory()[0].free_bytes
        key_a, key_b = model_key_of(tensors["a"]), model_key_of(tensors["b"])
        shared = await client.open("i1", index, key_a, tensors["a"])
        assert isinstance(shared.ipc, CudaIpcHandle)
        assert shared.device == index
        await client.refresh()
        loaded = client.memory()[0].free_bytes
        assert baseline - loaded >= size_bytes  # the holder holds the copy on the device

        for _ in range(2):  # the first opener's exit must not free the copy under the second
            opened = await asyncio.to_thread(open_in_child, shared, tensors["a"], uuid)
            assert opened["devices"] == ["cuda:0"]
            equal = opened["equal"]
            assert isinstance(equal, dict)
            assert sorted(equal) == sorted(t.name for t in tensors["a"])
            assert all(equal.values()), equal
            assert opened["dtypes"] == {
                "proj.weight": "torch.float32",
                "proj.bias": "torch.float32",
                "scale": "torch.bfloat16",
                "half": "torch.float16",
                "steps": "torch.int64",
            }

        assert await client.open("i2", index, key_a, tensors["a"]) == shared  # a hit
        await client.close("i1")
        await client.close("i2")
        other = await client.open("i3", index, key_b, tensors["b"])  # evicts "a"
        assert [m.model_key for m in client.books()[0].models] == [key_b]
        await client.refresh()
        swapped = client.memory()[0].free_bytes
        # one model's copy on the device, not two: "a"'s memory went back to the driver
        assert baseline - swapped < 1.5 * size_bytes
        opened = await asyncio.to_thread(open_in_child, other, tensors["b"], uuid)
        equal = opened["equal"]
        assert isinstance(equal, dict)
        assert all(equal.values()), equal
        await client.close("i3")
    finally:
        pid = client.pid
        await client.stop()
    assert pid is not None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)

"""The worker side of the GPU tier: a `SharedModel` opened as tensors on this worker's device.

Worker side (imports torch); never writes what it opens, owns nothing beyond the mappings
the returned tensors keep alive. `open_shared_weights(shared, device)`:

- a `CudaIpcHandle` (the holder's device copy) is opened through CUDA IPC
  (`gpu_cuda.open_shared`) on THIS process's ordinal, `device.index`: a GPU worker sees only
  its own device (`CUDA_VISIBLE_DEVICES`), so it is `cuda:0` here whatever the holder's
  ordinal (`shared.device`, `ipc.device`) was;
- a `FakeIpcHandle` (the fake device of `[gpu] fake_devices`) is one file in shared memory
  holding the model's buffer exactly as `gpu_tier.plan_layout` places it — each tensor's raw
  C-order bytes at its `offset_bytes`. It is mapped read-only, private copy-on-write, for
  the reasons `weights.attach` gives; each layout entry becomes a zero-copy view of it.
"""

from __future__ import annotations

import math
import mmap
from pathlib import Path

import numpy as np
import torch

from infless.weights.attach import AttachError, torch_dtype
from infless.weights.gpu_tier import CudaIpcHandle, FakeIpcHandle, SharedModel


def open_shared_weights(shared: SharedModel, device: torch.device) -> dict[str, torch.Tensor]:
    """The model's tensors, by name, as views of the tier's copy on `device` (no copy)."""
    if isinstance(shared.ipc, CudaIpcHandle):
        if device.type != "cuda":
            raise AttachError(
                f"model {shared.model_key}: a CUDA IPC handle opens on a CUDA device, "
                f"not on {device} (the placement's runtime and the tier's disagree)"
            )
        from infless.weights.gpu_cuda import open_shared

        return open_shared(shared, 0 if device.index is None else device.index)
    if device.type != "cpu":
        raise AttachError(
            f"model {shared.model_key}: a fake device's copy opens on the CPU (the fake "
            f"device), not on {device} (the placement's runtime and the tier's disagree)"
        )
    return open_fake(shared, shared.ipc)


def open_fake(shared: SharedModel, ipc: FakeIpcHandle) -> dict[str, torch.Tensor]:
    """The fake tier's file as tensors (module docstring); `AttachError` when the file and
    the layout disagree."""
    path = Path(ipc.path)
    with path.open("rb") as file:
        file_bytes = path.stat().st_size
        if file_bytes != ipc.size_bytes:
            raise AttachError(
                f"model {shared.model_key}: {path} holds {file_bytes} bytes, its handle says "
                f"{ipc.size_bytes}; the tier's file is inconsistent"
            )
        base = torch.empty(0, dtype=torch.uint8)
        if file_bytes:
            mapped = mmap.mmap(file.fileno(), file_bytes, access=mmap.ACCESS_COPY)
            base = torch.from_numpy(np.frombuffer(mapped, dtype=np.uint8))
    state: dict[str, torch.Tensor] = {}
    for item in shared.tensors:
        dtype = torch_dtype(item.dtype)
        end_bytes = item.offset_bytes + math.prod(item.shape) * dtype.itemsize
        if end_bytes > file_bytes:
            raise AttachError(
                f"model {shared.model_key}: tensor {item.name!r} ends at byte {end_bytes}, "
                f"past the {file_bytes} bytes of {path}; the layout is not this file's"
            )
        raw = base[item.offset_bytes : end_bytes]
        state[item.name] = raw.view(dtype).reshape(item.shape)
    return state

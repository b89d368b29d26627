"""The real CUDA side of the GPU tier: device copies in the holder, IPC opens in instances.

Imports torch (holder and worker processes only; the gateway never imports this module).
`CudaDevice` implements `gpu_tier.GpuDevice`: one contiguous device buffer per model, filled
from host tensors (normally the store's mapped files), exported with
`UntypedStorage._share_cuda_()` — the handle torch.multiprocessing itself sends. An instance
rebuilds the tensors with `open_shared`, which is what `torch.multiprocessing.reductions.
rebuild_cuda_tensor` does, minus pickle. Untested here: there is no GPU on these machines;
the bookkeeping around it is tested in `gpu_tier` with a fake device. Not wired yet: the
GPU backend that a later step connects (see `gpu_tier`'s status note).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

import torch

from infless.weights.gpu_tier import CudaIpcHandle, SharedModel, SharedTensorLayout, plan_layout


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


@dataclass(slots=True)
class CudaModelCopy:
    model_key: str
    buffer: torch.Tensor | None
    layout: list[SharedTensorLayout]


class CudaDevice:
    """One GPU, as the tier's holder process sees it."""

    def __init__(self, index: int) -> None:
        self._index = index

    @property
    def index(self) -> int:
        return self._index

    def total_bytes(self) -> int:
        return int(torch.cuda.get_device_properties(self._index).total_memory)

    def upload(self, model_key: str, tensors: Mapping[str, object]) -> object:
        host = {name: cast(torch.Tensor, t) for name, t in tensors.items()}
        layout, total_bytes = plan_layout(
            (name, dtype_name(t.dtype), list(t.shape)) for name, t in host.items()
        )
        buffer = torch.empty(total_bytes, dtype=torch.uint8, device=f"cuda:{self._index}")
        for item in layout:
            source = host[item.name].contiguous().reshape(-1).view(torch.uint8)
            buffer[item.offset_bytes : item.offset_bytes + source.numel()].copy_(source)
        torch.cuda.synchronize(self._index)
        return CudaModelCopy(model_key, buffer, layout)

    def export(self, copy: object) -> SharedModel:
        model = cast(CudaModelCopy, copy)
        if model.buffer is None:
            raise RuntimeError(f"model {model.model_key} was already freed")
        storage: Any = model.buffer.untyped_storage()
        device, handle, size, offset, counter, counter_offset, event, sync = storage._share_cuda_()
        ipc = CudaIpcHandle(
            int(device), bytes(handle), int(size), int(offset),
            bytes(counter), int(counter_offset),
            None if event is None else bytes(event), bool(sync),
        )  # fmt: skip
        return SharedModel(model.model_key, self._index, ipc, model.layout)

    def free(self, copy: object) -> None:
        model = cast(CudaModelCopy, copy)
        model.buffer = None  # torch's IPC ref counter keeps it alive while instances map it
        torch.cuda.empty_cache()


def open_shared(shared: SharedModel, device: int) -> dict[str, torch.Tensor]:
    """In an instance: the model's tensors as views of the holder's device buffer, opened on
    `device` — this process's ordinal of that GPU (0 for a worker that sees only its own),
    never the holder's (`ipc.device`)."""
    cuda: Any = torch.cuda
    cuda.init()
    ipc = shared.ipc
    if not isinstance(ipc, CudaIpcHandle):
        raise TypeError(f"model {shared.model_key}: not a CUDA IPC handle ({type(ipc).__name__})")
    storage_cls: Any = torch.UntypedStorage
    storage = storage_cls._new_shared_cuda(
        device,
        ipc.handle,
        ipc.storage_size_bytes,
        ipc.storage_offset_bytes,
        ipc.ref_counter_handle,
        ipc.ref_counter_offset,
        ipc.event_handle,
        ipc.event_sync_required,
    )
    base = torch.empty(0, dtype=torch.uint8, device=f"cuda:{device}").set_(storage)
    state: dict[str, torch.Tensor] = {}
    for item in shared.tensors:
        dtype = getattr(torch, item.dtype)
        size_bytes = dtype.itemsize
        for dim in item.shape:
            size_bytes *= dim
        raw = base[item.offset_bytes : item.offset_bytes + size_bytes]
        state[item.name] = raw.view(dtype).reshape(item.shape)
    return state

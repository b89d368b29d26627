"""The real CUDA side of the GPU tier: device copies in the holder, IPC opens in instances.

Imports torch (holder and worker processes only; the gateway never imports this module).
`CudaDevice` implements `gpu_tier.GpuDevice`: one contiguous device buffer per model, filled
from host tensors (the store's mapped files), exported once with
`UntypedStorage._share_cuda_()` — the handle torch.multiprocessing itself sends. An instance
rebuilds the tensors with `open_shared`, which is what `torch.multiprocessing.reductions.
rebuild_cuda_tensor` does, minus pickle.

Reference counting: `_share_cuda_` puts the buffer behind a counter in shared memory that
starts at 1 and that every opening process decrements when it lets go of its view; torch
frees the buffer only once the counter is <= 0 (else it parks it in its "limbo" until then).
The tier exports each copy once and hands that one handle to every instance, and its books
(not this counter) say when no instance holds a copy; so `free`, which the tier calls only
then, drops the holder's own count first. A SIGKILLed instance that never decremented
therefore cannot pin device memory.

Devices are addressed twice: `index` is the GPU's NVML index (the tier's and the gateway's
name for it); `ordinal` is its position among the devices this process sees
(`CUDA_VISIBLE_DEVICES`). The holder sees only its managed GPUs, a worker only its own (as
`cuda:0`): `open_shared` takes the opening process's ordinal, never the handle's.
Untested here (no GPU on these machines): `tests/gpu/test_gpu_tier_cuda.py` runs it on one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

import torch

from infless.weights.gpu_tier import CudaIpcHandle, SharedModel, SharedTensorLayout, plan_layout

CUDA_IPC_HANDLE_BYTES = 64  # sizeof(cudaIpcEventHandle_t): what _new_shared_cuda checks


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


@dataclass(slots=True)
class CudaModelCopy:
    model_key: str
    buffer: torch.Tensor | None
    layout: list[SharedTensorLayout]
    shared: SharedModel | None = None  # its export, once exported


class CudaDevice:
    """One GPU, as the tier's holder process sees it (NVML `index`, CUDA `ordinal`)."""

    def __init__(self, index: int, ordinal: int | None = None) -> None:
        self._index = index
        self._ordinal = index if ordinal is None else ordinal

    @property
    def index(self) -> int:
        return self._index

    @property
    def ordinal(self) -> int:
        return self._ordinal

    def total_bytes(self) -> int:
        return int(torch.cuda.get_device_properties(self._ordinal).total_memory)

    def memory_bytes(self) -> tuple[int, int]:
        """(free, total) bytes of the whole device, as the driver reports them."""
        free_bytes, total_bytes = torch.cuda.mem_get_info(self._ordinal)
        return int(free_bytes), int(total_bytes)

    def upload(self, model_key: str, tensors: Mapping[str, object]) -> object:
        host = {name: cast(torch.Tensor, t) for name, t in tensors.items()}
        layout, total_bytes = plan_layout(
            (name, dtype_name(t.dtype), list(t.shape)) for name, t in host.items()
        )
        buffer = torch.empty(total_bytes, dtype=torch.uint8, device=f"cuda:{self._ordinal}")
        for item in layout:
            source = host[item.name].contiguous().reshape(-1).view(torch.uint8)
            buffer[item.offset_bytes : item.offset_bytes + source.numel()].copy_(source)
        torch.cuda.synchronize(self._ordinal)
        return CudaModelCopy(model_key, buffer, layout)

    def export(self, copy: object) -> SharedModel:
        model = _cuda_copy(copy)
        if model.shared is not None:  # a second _share_cuda_ would stack another counter
            return model.shared
        if model.buffer is None:
            raise RuntimeError(f"model {model.model_key} was already freed")
        storage: Any = model.buffer.untyped_storage()
        device, handle, size, offset, counter, counter_offset, event, sync = storage._share_cuda_()
        ipc = CudaIpcHandle(
            device=int(device),
            handle=bytes(handle),
            storage_size_bytes=int(size),
            storage_offset_bytes=int(offset),
            ref_counter_handle=bytes(counter),
            ref_counter_offset=int(counter_offset),
            event_handle=None if event is None else bytes(event),
            event_sync_required=bool(sync),
        )
        model.shared = SharedModel(model.model_key, self._index, ipc, model.layout)
        return model.shared

    def free(self, copy: object) -> None:
        model = _cuda_copy(copy)
        if model.buffer is None:
            return
        if model.shared is not None and isinstance(model.shared.ipc, CudaIpcHandle):
            ipc = model.shared.ipc
            storage_cls: Any = torch.UntypedStorage
            # the holder's own count (see the module docstring): no instance holds it now
            storage_cls._release_ipc_counter_cuda(ipc.ref_counter_handle, ipc.ref_counter_offset)
        model.buffer = None
        cuda: Any = torch.cuda  # ipc_collect is untyped
        cuda.ipc_collect()  # frees what torch parked while counters were positive
        torch.cuda.empty_cache()  # and hands the segment back to the driver


def _cuda_copy(copy: object) -> CudaModelCopy:
    if not isinstance(copy, CudaModelCopy):
        raise TypeError(f"not a CUDA device copy: {type(copy).__name__}")
    return copy


def open_shared(shared: SharedModel, device: int) -> dict[str, torch.Tensor]:
    """In an instance: the model's tensors as views of the holder's device buffer.

    `device` is the CUDA ordinal of the GPU in the calling process (a worker sees only its
    GPU: 0); the handle's own `device` is the holder's ordinal and means nothing here. The
    tensors keep the mapping open; dropping the last of them closes it (and decrements the
    holder's counter).
    """
    ipc = shared.ipc
    if not isinstance(ipc, CudaIpcHandle):
        raise TypeError(
            f"model {shared.model_key}: a {type(ipc).__name__} is not a CUDA IPC handle; "
            "a fake device's copy is opened by mapping its file"
        )
    cuda: Any = torch.cuda  # torch.cuda.init is untyped
    cuda.init()
    storage_cls: Any = torch.UntypedStorage
    # the order of torch.multiprocessing.reductions.rebuild_cuda_tensor's call (torch 2.11
    # through 2.13): device, handle, size, offset, counter, counter offset, event, sync
    storage = storage_cls._new_shared_cuda(
        device,
        ipc.handle,
        ipc.storage_size_bytes,
        ipc.storage_offset_bytes,
        ipc.ref_counter_handle,
        ipc.ref_counter_offset,
        ipc.event_handle if ipc.event_handle is not None else bytes(CUDA_IPC_HANDLE_BYTES),
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

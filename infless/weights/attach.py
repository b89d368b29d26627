"""Worker side of the tensor store: map stored tensor files and wrap them as torch tensors.

Imports torch; the gateway never imports this module. Owns nothing beyond the mappings it
returns (they live as long as the tensors do); never writes to the store.

Mapping choice: each file is opened read-only and mapped **private copy-on-write**
(`mmap.ACCESS_COPY`, i.e. `MAP_PRIVATE` with `PROT_READ | PROT_WRITE`). Pages are the store's
tmpfs pages, shared by every instance (zero-copy) until someone writes one; a write through a
tensor copies that one page into the writer's private memory, so the file and every other
instance's view stay unchanged — the kernel guarantees it, whatever the worker does. We
prefer it to a `PROT_READ` map because torch has no read-only tensors: `torch.from_numpy`
warns on a non-writable array, and an in-place op on a weight would then kill the worker with
SIGSEGV instead of merely diverging its own copy. Store files are also mode 0o400 and opened
`O_RDONLY`, so a worker cannot reopen them for writing (unless it runs as root).
Never populate these maps eagerly (`MAP_POPULATE`, `mlock`): on a private writable map the
kernel would pre-fault them for writing and copy every page.
"""

from __future__ import annotations

import math
import mmap
import os
import resource
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from infless.weights.stored import StoredTensor

_FD_HEADROOM = 256  # Python's mmap keeps a duplicate descriptor per map


class AttachError(RuntimeError):
    """A stored tensor cannot be mapped; the message names the tensor and the file."""


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype for a StoredTensor dtype name ("float32", "bfloat16", "bool", ...)."""
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise AttachError(f"dtype {name!r} is not a torch dtype")
    return dtype


def ensure_descriptor_headroom(count: int) -> None:
    """Raise the soft open-file limit when `count` more maps would come near it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = sum(1 for _ in Path("/proc/self/fd").iterdir()) + count + _FD_HEADROOM
    if soft != resource.RLIM_INFINITY and needed > soft:
        limit = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))


def map_tensor(stored: StoredTensor) -> torch.Tensor:
    """One stored tensor as a zero-copy, copy-on-write tensor of its dtype and shape."""
    dtype = torch_dtype(stored.dtype)
    shape = tuple(stored.shape)
    size_bytes = math.prod(shape) * dtype.itemsize
    with Path(stored.path).open("rb") as file:
        file_bytes = os.fstat(file.fileno()).st_size
        if file_bytes != size_bytes:
            raise AttachError(
                f"tensor {stored.name!r}: {stored.path} holds {file_bytes} bytes, "
                f"{stored.dtype}{list(shape)} needs {size_bytes}; the store is inconsistent"
            )
        if size_bytes == 0:
            return torch.empty(shape, dtype=dtype)
        mapped = mmap.mmap(file.fileno(), size_bytes, access=mmap.ACCESS_COPY)
    raw = torch.from_numpy(np.frombuffer(mapped, dtype=np.uint8))
    return raw.view(dtype).reshape(shape)


def attach(stored: Sequence[StoredTensor]) -> dict[str, torch.Tensor]:
    """The state dict named by `stored`, every tensor mapped from the store (zero-copy)."""
    ensure_descriptor_headroom(len(stored))
    state: dict[str, torch.Tensor] = {}
    for item in stored:
        try:
            state[item.name] = map_tensor(item)
        except OSError as exc:
            raise AttachError(f"tensor {item.name!r}: cannot map {item.path}: {exc}") from exc
    return state


def attach_state_dict_to(
    module: torch.nn.Module, stored: Sequence[StoredTensor], *, strict: bool = True
) -> torch.nn.Module:
    """Give a module built on the meta device its weights from the store, zero-copy.

    Uses `load_state_dict(..., assign=True)` so parameters and buffers become the mapped
    tensors themselves; fails when any parameter or buffer is still on the meta device.
    """
    module.load_state_dict(attach(stored), strict=strict, assign=True)
    still_meta = [
        name
        for name, tensor in (*module.named_parameters(), *module.named_buffers())
        if tensor.is_meta
    ]
    if still_meta:
        raise AttachError(
            f"{len(still_meta)} tensors are still on the meta device after attaching "
            f"(first: {still_meta[0]!r}); the package lacks them or they are non-persistent "
            "buffers the model must create itself"
        )
    return module

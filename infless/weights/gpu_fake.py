"""The fake GPU device of `[gpu] fake_devices`: a model's device copy is one file in shared memory.

Holder side, torch-free: file I/O under the holder's fake root, no clock. `FakeDevice`
implements `gpu_tier.GpuDevice` on machines without a GPU, so the tier, the holder process
and its client run the real code paths in CI. The file is the contract with the worker
side (`gpu_open`, which maps it read-only and slices tensors by the layout): the model's
buffer exactly as `gpu_tier.plan_layout` places it — each tensor's raw C-order bytes at its
`offset_bytes`, zeros in the alignment gaps — written under a temp name and renamed, so a
reader never sees a partial copy, mode 0o400. `free` unlinks it: instances that mapped it
keep their mapping, as CUDA IPC's reference counts keep a device buffer alive.

The holder hands `upload` `HostTensor`s (`map_host`: the store's files mapped read-only),
not torch tensors: the fake runtime never imports torch.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import mmap
import os
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from infless.weights.gpu_tier import FakeIpcHandle, SharedModel, SharedTensorLayout, plan_layout
from infless.weights.package_index import ELEMENT_BYTES
from infless.weights.stored import StoredTensor

TEMP_PREFIX = ".tmp-"
COPY_MODE = 0o400  # read-only for its owner: instances map it, nobody rewrites it


@dataclass(frozen=True, slots=True)
class HostTensor:
    """A tensor in host memory as the fake device takes it: dtype name, shape, raw bytes."""

    dtype: str
    shape: tuple[int, ...]
    data: bytes | memoryview | mmap.mmap

    @property
    def size_bytes(self) -> int:
        return math.prod(self.shape) * ELEMENT_BYTES[self.dtype]


def map_host(stored: Sequence[StoredTensor]) -> dict[str, HostTensor]:
    """The store's files of `stored`, mapped read-only (zero-copy), by tensor name."""
    host: dict[str, HostTensor] = {}
    for item in stored:
        if item.dtype not in ELEMENT_BYTES:
            raise ValueError(f"tensor {item.name!r} has dtype {item.dtype!r}, unknown to the tier")
        tensor_bytes = math.prod(item.shape) * ELEMENT_BYTES[item.dtype]
        with Path(item.path).open("rb") as file:
            file_bytes = os.fstat(file.fileno()).st_size
            if file_bytes != tensor_bytes:
                raise ValueError(
                    f"tensor {item.name!r}: {item.path} holds {file_bytes} bytes, "
                    f"{item.dtype}{item.shape} needs {tensor_bytes}; the store is inconsistent"
                )
            data: bytes | mmap.mmap = b""
            if tensor_bytes:
                data = mmap.mmap(file.fileno(), tensor_bytes, access=mmap.ACCESS_READ)
        host[item.name] = HostTensor(item.dtype, tuple(item.shape), data)
    return host


@dataclass(slots=True)
class FakeModelCopy:
    model_key: str
    path: Path
    size_bytes: int
    layout: list[SharedTensorLayout]


class FakeDevice:
    """One fake GPU: device copies are files under `root/<index>/`, within `total_bytes`."""

    def __init__(self, index: int, root: Path, total_bytes: int) -> None:
        if total_bytes <= 0:
            raise ValueError(
                f"fake GPU {index}: total_bytes = {total_bytes}; give the fake device a "
                "positive memory size (gpu.fake_memory_mib)"
            )
        self._index = index
        self._total_bytes = total_bytes
        self.directory = root / str(index)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._live: dict[Path, int] = {}

    @property
    def index(self) -> int:
        return self._index

    def total_bytes(self) -> int:
        return self._total_bytes

    def free_bytes(self) -> int:
        """The fake memory no live copy fills (what `cudaMemGetInfo` reports for real)."""
        return self._total_bytes - sum(self._live.values())

    def clear_leftovers(self) -> int:
        """Unlink every file in this device's directory (a dead holder's copies); how many."""
        removed = 0
        for path in self.directory.iterdir():
            if path.is_file() and path not in self._live:
                path.unlink(missing_ok=True)
                removed += 1
        return removed

    def upload(self, model_key: str, tensors: Mapping[str, object]) -> object:
        host = {name: _host_tensor(name, value) for name, value in tensors.items()}
        layout, size_bytes = plan_layout((n, t.dtype, t.shape) for n, t in host.items())
        name = hashlib.blake2b(model_key.encode(), digest_size=10).hexdigest()
        path = self.directory / f"{name}-{secrets.token_hex(4)}"  # a new file per upload
        temp = self.directory / f"{TEMP_PREFIX}{path.name}"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, COPY_MODE)
        try:
            try:
                os.ftruncate(fd, size_bytes)
                for item in layout:
                    _write_at(fd, memoryview(host[item.name].data), item.offset_bytes)
            finally:
                os.close(fd)
            temp.rename(path)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
        self._live[path] = size_bytes
        return FakeModelCopy(model_key, path, size_bytes, layout)

    def export(self, copy: object) -> SharedModel:
        model = _fake_copy(copy)
        handle = FakeIpcHandle(str(model.path), model.size_bytes)
        return SharedModel(model.model_key, self._index, handle, model.layout)

    def free(self, copy: object) -> None:
        model = _fake_copy(copy)
        self._live.pop(model.path, None)
        with contextlib.suppress(FileNotFoundError):
            model.path.unlink()


def _host_tensor(name: str, value: object) -> HostTensor:
    if not isinstance(value, HostTensor):
        raise TypeError(
            f"tensor {name!r} is a {type(value).__name__}; the fake device takes HostTensor "
            "values (gpu_fake.map_host)"
        )
    if value.dtype not in ELEMENT_BYTES:
        raise ValueError(f"tensor {name!r} has dtype {value.dtype!r}, unknown to the tier")
    if len(memoryview(value.data).cast("B")) != value.size_bytes:
        raise ValueError(
            f"tensor {name!r}: {len(memoryview(value.data).cast('B'))} bytes given, "
            f"{value.dtype}{list(value.shape)} needs {value.size_bytes}"
        )
    return value


def _fake_copy(copy: object) -> FakeModelCopy:
    if not isinstance(copy, FakeModelCopy):
        raise TypeError(f"not a fake device copy: {type(copy).__name__}")
    return copy


def _write_at(fd: int, data: memoryview, offset_bytes: int) -> None:
    """All of `data` at `offset_bytes` (pwrite may write less than asked)."""
    view = data.cast("B")
    while view:
        written = os.pwrite(fd, view, offset_bytes)
        view = view[written:]
        offset_bytes += written

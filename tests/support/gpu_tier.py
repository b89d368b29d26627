"""Test helpers for the GPU tier: stored tensors written as raw files, a fake copy read back."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import numpy as np

from infless.weights.gpu_tier import FakeIpcHandle, SharedModel
from infless.weights.package_index import ELEMENT_BYTES
from infless.weights.stored import StoredTensor


def write_stored(directory: Path, arrays: dict[str, np.ndarray]) -> list[StoredTensor]:
    """Each array as a store-like file (raw C-order bytes, named by their digest)."""
    directory.mkdir(parents=True, exist_ok=True)
    stored = []
    for name, array in arrays.items():
        data = np.ascontiguousarray(array).tobytes()
        key = hashlib.sha1(f"{array.dtype}{array.shape}".encode() + data).hexdigest()
        path = directory / key
        path.write_bytes(data)
        stored.append(StoredTensor(name, str(path), str(array.dtype), list(array.shape)))
    return stored


def fake_copy_tensors(shared: SharedModel) -> dict[str, bytes]:
    """The bytes of each tensor in a fake device copy, sliced by the shared layout."""
    assert isinstance(shared.ipc, FakeIpcHandle)
    content = Path(shared.ipc.path).read_bytes()
    assert len(content) == shared.ipc.size_bytes
    return {
        t.name: content[
            t.offset_bytes : t.offset_bytes + math.prod(t.shape) * ELEMENT_BYTES[t.dtype]
        ]
        for t in shared.tensors
    }


def stored_bytes(tensors: list[StoredTensor]) -> dict[str, bytes]:
    """Each stored tensor's file content, by name."""
    return {t.name: Path(t.path).read_bytes() for t in tensors}

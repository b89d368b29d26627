"""`StoredTensor`: one tensor of a model's state dict as a file of the shared tensor store.

The store hands these out (`TensorStore.publish`), the worker protocol carries them to the
worker (`LoadModel.store_tensors`) and `attach` maps them. Pure data: no I/O, no torch.
"""

from __future__ import annotations

import msgspec


class StoredTensor(msgspec.Struct, array_like=True, frozen=True):
    """One tensor of a model's state dict as a file of the shared tensor store."""

    name: str
    path: str
    dtype: str
    shape: list[int]

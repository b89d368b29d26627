"""A fake GPU tier's device copy, written as the fake holder writes it: one file holding each
tensor's raw C-order bytes at the offset `gpu_tier.plan_layout` gives it."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch

from infless.weights.gpu_tier import FakeIpcHandle, SharedModel, plan_layout


def write_fake_shared_model(
    state: Mapping[str, torch.Tensor], path: Path, model_key: str = "model"
) -> SharedModel:
    """Write `state` into `path` as one buffer; the `SharedModel` an instance opens."""
    layout, size_bytes = plan_layout(
        (name, str(t.dtype).removeprefix("torch."), list(t.shape)) for name, t in state.items()
    )
    buffer = bytearray(size_bytes)
    for item in layout:
        raw = state[item.name].detach().contiguous().reshape(-1).view(torch.uint8).numpy()
        buffer[item.offset_bytes : item.offset_bytes + raw.size] = raw.tobytes()
    path.write_bytes(bytes(buffer))
    return SharedModel(model_key, 0, FakeIpcHandle(str(path), size_bytes), layout)

"""Random inputs shaped like a signature (test support, not a test module)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from infless.models.package import TensorSignature

TOKEN_ID_RANGE = 25_000  # above every zoo vocabulary: exercises the clamping too


def random_inputs(
    signature: Sequence[TensorSignature], batch_size: int, seed: int = 0
) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    tensors = []
    for spec in signature:
        shape = (batch_size, *spec.shape)
        if spec.dtype == "float32":
            tensors.append(torch.randn(shape, generator=generator))
        elif spec.dtype == "int64":
            tensors.append(torch.randint(0, TOKEN_ID_RANGE, shape, generator=generator))
        else:
            raise AssertionError(f"no random input for dtype {spec.dtype}")
    return tensors


def as_outputs(raw: object) -> list[torch.Tensor]:
    """A module's return value as a list of tensors."""
    values = list(raw) if isinstance(raw, tuple | list) else [raw]
    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    assert len(tensors) == len(values), values
    return tensors

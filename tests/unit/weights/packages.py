"""Small synthetic function packages for the tensor-store tests (no zoo, no torch)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

from infless.models.package import (
    MANIFEST_FILE,
    WEIGHTS_FILE,
    PackageManifest,
    TensorSignature,
    encode_manifest,
)

_CODES = {
    "bool": "BOOL",
    "uint8": "U8",
    "int8": "I8",
    "int16": "I16",
    "float16": "F16",
    "int32": "I32",
    "float32": "F32",
    "int64": "I64",
    "float64": "F64",
}


def write_safetensors(
    path: Path, tensors: dict[str, np.ndarray], codes: dict[str, str] | None = None
) -> None:
    """Write a safetensors file; `codes` overrides a tensor's dtype code (e.g. "BF16")."""
    header: dict[str, object] = {"__metadata__": {"format": "test"}}
    chunks: list[bytes] = []
    offset = 0
    for name, array in tensors.items():
        data = np.ascontiguousarray(array).tobytes()
        code = (codes or {}).get(name, _CODES[str(array.dtype)])
        header[name] = {
            "dtype": code,
            "shape": list(array.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        chunks.append(data)
        offset += len(data)
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + b"".join(chunks))


def write_package(
    directory: Path, tensors: dict[str, np.ndarray], codes: dict[str, str] | None = None
) -> Path:
    """A function package directory holding `tensors` as its weights."""
    directory.mkdir(parents=True, exist_ok=True)
    manifest = PackageManifest(
        name=directory.name,
        architecture="test-mlp",
        inputs=[TensorSignature("x", "float32", [4])],
        outputs=[TensorSignature("y", "float32", [2])],
    )
    (directory / MANIFEST_FILE).write_bytes(encode_manifest(manifest))
    write_safetensors(directory / WEIGHTS_FILE, tensors, codes)
    return directory


def backbone(seed: int = 0, size: int = 256) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "backbone.weight": rng.standard_normal((size, 64)).astype(np.float32),
        "backbone.bias": rng.standard_normal(size).astype(np.float32),
        "bn.num_batches_tracked": np.array(7, dtype=np.int64),
    }


def variant(seed: int, head_seed: int) -> dict[str, np.ndarray]:
    """A transfer-learning variant: a shared backbone and its own head."""
    rng = np.random.default_rng(1000 + head_seed)
    return {**backbone(seed), "head.weight": rng.standard_normal((10, 256)).astype(np.float32)}

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from infless.weights.package_index import PackageFormatError, index_weights, tensor_key
from tests.unit.weights.packages import write_safetensors


def test_index_reads_dtypes_shapes_and_offsets(tmp_path: Path) -> None:
    path = tmp_path / "w.safetensors"
    weight = np.arange(12, dtype=np.float32).reshape(3, 4)
    write_safetensors(path, {"w": weight, "n": np.array(3, dtype=np.int64)})
    index = index_weights(path)
    by_name = {t.name: t for t in index.tensors}
    assert by_name["w"].dtype == "float32"
    assert by_name["w"].shape == (3, 4)
    assert by_name["n"].shape == ()
    raw = path.read_bytes()
    w = by_name["w"]
    assert raw[w.offset_bytes : w.offset_bytes + w.size_bytes] == weight.tobytes()
    assert index.unique_bytes == 48 + 8


def test_identical_tensors_share_a_key_across_files(tmp_path: Path) -> None:
    shared = np.ones((4, 4), dtype=np.float32)
    write_safetensors(tmp_path / "a", {"x": shared, "y": np.zeros(2, dtype=np.float32)})
    write_safetensors(tmp_path / "b", {"renamed": shared})
    a, b = index_weights(tmp_path / "a"), index_weights(tmp_path / "b")
    assert a.tensors[0].key == b.tensors[0].key
    assert a.tensors[0].key != a.tensors[1].key


def test_key_covers_dtype_and_shape_not_only_bytes() -> None:
    data = np.zeros(8, dtype=np.float32).tobytes()
    assert tensor_key("float32", (8,), data) != tensor_key("float32", (2, 4), data)
    assert tensor_key("float32", (8,), data) != tensor_key("int32", (8,), data)


def test_repeated_tensor_counts_once(tmp_path: Path) -> None:
    same = np.ones(16, dtype=np.float32)
    write_safetensors(tmp_path / "w", {"tied.a": same, "tied.b": same})
    index = index_weights(tmp_path / "w")
    assert len(index.tensors) == 2
    assert index.unique_bytes == 64


def test_bfloat16_is_indexed(tmp_path: Path) -> None:
    write_safetensors(tmp_path / "w", {"h": np.zeros(4, dtype=np.int16)}, codes={"h": "BF16"})
    assert index_weights(tmp_path / "w").tensors[0].dtype == "bfloat16"


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"\x01", "too short"),
        (struct.pack("<Q", 1000) + b"{}", "does not fit"),
        (struct.pack("<Q", 2) + b"[]", "JSON object"),
        (struct.pack("<Q", 3) + b"{x}", "not valid JSON"),
    ],
)
def test_malformed_files_are_named(tmp_path: Path, payload: bytes, message: str) -> None:
    path = tmp_path / "bad"
    path.write_bytes(payload)
    with pytest.raises(PackageFormatError, match=message):
        index_weights(path)


def test_offsets_must_match_shape(tmp_path: Path) -> None:
    header = b'{"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 8]}}'
    (tmp_path / "bad").write_bytes(struct.pack("<Q", len(header)) + header + bytes(8))
    with pytest.raises(PackageFormatError, match="'w' data_offsets"):
        index_weights(tmp_path / "bad")


def test_unknown_dtype_is_refused(tmp_path: Path) -> None:
    header = b'{"w": {"dtype": "C64", "shape": [1], "data_offsets": [0, 8]}}'
    (tmp_path / "bad").write_bytes(struct.pack("<Q", len(header)) + header + bytes(8))
    with pytest.raises(PackageFormatError, match="unsupported dtype 'C64'"):
        index_weights(tmp_path / "bad")

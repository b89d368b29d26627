"""The torch-free package manifest: JSON round trip and validation errors."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from infless.errors import UnknownModel
from infless.models.package import (
    MANIFEST_FILE,
    encode_manifest,
    is_zoo_name,
    load_manifest,
    package_dir_for,
)
from infless.models.zoo import ZOO


@pytest.mark.parametrize("name", ["ssd", "dssm-2365", "resnet-50-tl-c"])
def test_manifest_round_trip(tmp_path: Path, name: str) -> None:
    manifest = ZOO[name].manifest(weights_sha256="ab" * 32, weights_bytes=1234)
    (tmp_path / MANIFEST_FILE).write_bytes(encode_manifest(manifest))
    loaded = load_manifest(tmp_path)
    assert loaded == manifest
    assert loaded.input_specs == tuple(s.to_spec() for s in ZOO[name].inputs)
    assert [s.describe() for s in loaded.output_specs] == [
        s.to_spec().describe() for s in ZOO[name].outputs
    ]


def test_missing_manifest(tmp_path: Path) -> None:
    with pytest.raises(UnknownModel, match="missing"):
        load_manifest(tmp_path)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"postprocess": "argmax"}, "postprocess 'argmax' is unknown"),
        ({"format_version": 99}, "format_version 99"),
        ({"inputs": []}, "at least one input"),
        ({"outputs": [{"name": "y", "dtype": "complex64", "shape": [2]}]}, "complex64"),
        ({"architecture": 7}, "architecture"),
    ],
)
def test_invalid_manifests_are_unknown_models(
    tmp_path: Path, change: dict[str, object], message: str
) -> None:
    document = msgspec.json.decode(encode_manifest(ZOO["mnist"].manifest()))
    document.update(change)
    (tmp_path / MANIFEST_FILE).write_bytes(msgspec.json.encode(document))
    with pytest.raises(UnknownModel, match=message):
        load_manifest(tmp_path)


def test_zoo_names_are_resolved_inside_the_repository(tmp_path: Path) -> None:
    assert all(is_zoo_name(name) for name in ZOO)
    assert package_dir_for("mnist", tmp_path) == tmp_path / "mnist"
    assert package_dir_for(str(tmp_path / "pkg"), Path("elsewhere")) == tmp_path / "pkg"

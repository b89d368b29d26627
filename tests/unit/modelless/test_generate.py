"""The variant generator's own side (no child processes here): accuracy metrics, variant
packages on disk, predictions scaled from fp32's, argument checks."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from infless.modelless import accuracy, predictions, profile_child, variant_packages
from infless.modelless import generate as g
from infless.modelless.profiles import TRANSFORMS, LatencyPoint, VariantProfile
from infless.models.package import (
    MANIFEST_FILE,
    WEIGHTS_FILE,
    PackageManifest,
    TensorSignature,
    encode_manifest,
    load_manifest,
)
from infless.packaging.digest import package_digest


def test_top1_metrics_against_labels_and_against_fp32() -> None:
    reference = np.array([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]], dtype=np.float32)
    found = reference.copy()
    found[3] = [0.4, 0.6]  # one of four disagrees
    assert accuracy.score("top1-agreement", found, reference, None) == 0.75
    assert accuracy.score("top1-agreement", reference, reference, None) == 1.0
    labels = np.array([1, 0, 0, 0])
    assert accuracy.score("top1-labels", reference, reference, labels) == 0.75
    class_ids = np.array([1, 0, 1, 1])  # an output that is the class id itself
    assert accuracy.score("top1-labels", class_ids, class_ids, labels) == 0.5
    with pytest.raises(ValueError, match="labels"):
        accuracy.score("top1-labels", reference, reference, labels[:2])


def test_cosine_is_per_sample_over_the_flattened_first_output() -> None:
    reference = np.array([[[1.0, 0.0]], [[0.0, 2.0]], [[0.0, 0.0]]])
    found = np.array([[[2.0, 0.0]], [[2.0, 0.0]], [[0.0, 0.0]]])
    # alike (1), orthogonal (0), both zero (alike: 1)
    assert accuracy.score("cosine", found, reference, None) == pytest.approx(2.0 / 3.0)
    assert accuracy.score("cosine", reference, reference, None) == 1.0
    with pytest.raises(ValueError, match="shape"):
        accuracy.score("cosine", found[:, :, :1], reference, None)


def _package(directory: Path, digest: bool = False) -> Path:
    (directory / "src" / "__pycache__").mkdir(parents=True)
    (directory / "src" / "mymodel.py").write_text("VALUE = 1\n")
    (directory / "src" / "__pycache__" / "mymodel.cpython-311.pyc").write_bytes(b"x")
    (directory / "tokenizer.json").write_text("{}")
    (directory / WEIGHTS_FILE).write_bytes(b"weights")
    manifest = PackageManifest(
        name="mine",
        architecture="mymodel:build",
        inputs=[TensorSignature("x", "float32", [4])],
        outputs=[TensorSignature("y", "float32", [2])],
    )
    (directory / MANIFEST_FILE).write_bytes(encode_manifest(manifest))
    if digest:
        from infless.packaging.digest import write_digest

        write_digest(directory)
    return directory


def test_a_variant_package_links_the_files_and_names_its_transform(tmp_path: Path) -> None:
    source = _package(tmp_path / "pkg", digest=True)
    target = tmp_path / "out" / "int8"
    target.mkdir(parents=True)
    (target / "stale.bin").write_bytes(b"old")
    manifest = load_manifest(source)
    variant_packages.write_variant(source, manifest, target, "mine", "int8")
    written = load_manifest(target)
    assert written.name == "mine--int8"
    assert written.transform == "int8"
    assert written.architecture == manifest.architecture
    assert written.digest == package_digest(target) != manifest.digest
    assert not (target / "stale.bin").exists()
    for name in (WEIGHTS_FILE, "tokenizer.json"):
        assert (source / name).samefile(target / name)  # hard links
    copied = target / "src" / "mymodel.py"
    assert copied.read_text() == "VALUE = 1\n"
    assert not (source / "src" / "mymodel.py").samefile(copied)  # a copy
    assert not (target / "src" / "__pycache__").exists()
    assert json.loads((source / MANIFEST_FILE).read_text())["name"] == "mine"  # untouched
    with pytest.raises(ValueError, match="remove the source package"):
        variant_packages.write_variant(source, manifest, source, "mine", "int8")


def _ready(name: str, figures: dict[tuple[int, int], float]) -> VariantProfile:
    return VariantProfile(
        model="m",
        name=name,
        transform=name,
        status="ready",
        latency=[LatencyPoint(b, c, ms) for (b, c), ms in sorted(figures.items())],
    )


def test_predictions_scale_fp32s_by_the_ratio_at_one_point(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fp32 = _ready("fp32", {(1, 1): 2.0, (4, 1): 6.0, (4, 2): 4.0})
    int8 = _ready("int8", {(1, 1): 1.0, (4, 1): 2.5, (4, 2): 2.0})
    failed = VariantProfile(model="m", name="bf16", transform="bf16", status="failed")
    predicted = {(1, 1): 2.2, (4, 1): 5.0}  # nothing for (4, 2): the operators lack it

    def fake(*_args: object) -> dict[tuple[int, int], float]:
        return predicted

    monkeypatch.setattr(predictions, "fp32_predictions", fake)
    manifest = PackageManifest(name="m", architecture="a", inputs=[], outputs=[])
    result = predictions.with_predictions([fp32, int8, failed], Path(), manifest, Path(), print)
    by_name = {v.name: {(p.batch_size, p.cpus): p.predicted_ms for p in v.latency} for v in result}
    assert by_name["fp32"] == {(1, 1): 2.2, (4, 1): 5.0, (4, 2): None}
    assert by_name["int8"] == {(1, 1): pytest.approx(1.1), (4, 1): pytest.approx(2.5), (4, 2): None}
    assert result[2] == failed


def test_a_predictor_that_fails_leaves_no_predictions(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_args: object) -> dict[tuple[int, int], float]:
        raise RuntimeError("stale database")

    monkeypatch.setattr(predictions, "fp32_predictions", broken)
    lines: list[str] = []
    profiles = [_ready("fp32", {(1, 1): 2.0})]
    manifest = PackageManifest(name="m", architecture="a", inputs=[], outputs=[])
    assert (
        predictions.with_predictions(profiles, Path(), manifest, Path(), lines.append) == profiles
    )
    assert "stale database" in lines[0]


def test_no_profile_database_means_no_predictions(tmp_path: Path) -> None:
    manifest = load_manifest(_package(tmp_path / "pkg"))
    points = [LatencyPoint(1, 1, 1.0)]
    assert (
        predictions.fp32_predictions(tmp_path / "pkg", manifest, tmp_path / "state", points) == {}
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "exactly one"),
        ({"generate_samples": 4, "validation": Path("v.npz")}, "exactly one"),
        ({"generate_samples": 0}, "at least one sample"),
        ({"generate_samples": 4, "variants": ["fp16"]}, "unknown variant"),
        ({"generate_samples": 4, "metric": "top1-labels"}, "needs a validation file"),
        ({"generate_samples": 4, "metric": "f1"}, "unknown metric"),
        ({"validation": Path("missing.npz")}, "no such file"),
    ],
)
def test_arguments_are_checked_before_anything_runs(
    tmp_path: Path, kwargs: dict[str, object], message: str
) -> None:
    source = _package(tmp_path / "pkg")
    with pytest.raises(ValueError, match=message):
        g.generate(source, "mine", tmp_path / "out", **kwargs)  # type: ignore[arg-type]
    assert not (tmp_path / "out").exists()


def test_variants_go_outside_the_source_package(tmp_path: Path) -> None:
    source = _package(tmp_path / "pkg")
    with pytest.raises(ValueError, match="outside the source package"):
        g.generate(source, "mine", source / "variants", generate_samples=4)
    assert not (source / "variants").exists()


def test_a_text_validation_set_needs_a_handler(tmp_path: Path) -> None:
    source = _package(tmp_path / "pkg")
    (tmp_path / "lines.txt").write_text("hello\n")
    with pytest.raises(ValueError, match="handler"):
        g.generate(source, "mine", tmp_path / "out", validation=tmp_path / "lines.txt")


def test_batch_sizes_and_default_cores() -> None:
    assert profile_child.batch_sizes(32) == [1, 2, 4, 8, 16, 32]
    assert profile_child.batch_sizes(12) == [1, 2, 4, 8]
    cores = g.default_cpus()
    assert cores[0] == 1
    assert max(cores) <= 2


def test_the_manifest_knows_every_variant_transform() -> None:
    from infless.models.package import TRANSFORM_NAMES

    assert {*TRANSFORMS, ""} == TRANSFORM_NAMES

"""The worker-side loader: builders, meta build + assigned weights, packages, postprocess."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from infless.errors import UnknownModel
from infless.models.build import build_meta_module, build_package, build_seeded_module
from infless.models.kernels import OneDnnPointwiseConv2d, prefer_onednn
from infless.models.loader import (
    POSTPROCESS_STEPS,
    apply_postprocess,
    attach_weights,
    build_module,
    load_model,
    load_package_weights,
    prime_builders,
    resolve_builder,
)
from infless.models.package import (
    MANIFEST_FILE,
    POSTPROCESS_NAMES,
    WEIGHTS_FILE,
    PackageManifest,
    TensorSignature,
    encode_manifest,
)
from infless.models.zoo import BUILDERS, ZOO
from infless.models.zoo.cnn import mnist_cnn
from tests.unit.models.inputs import as_outputs, random_inputs

CUSTOM = "tests.unit.models.custom_arch"


def _custom_manifest(architecture: str = f"{CUSTOM}:two_in_two_out") -> PackageManifest:
    return PackageManifest(
        name="custom",
        architecture=architecture,
        arch_kwargs={"features": 6, "vocab": 11, "classes": 3},
        inputs=[TensorSignature("features", "float32", [6]), TensorSignature("ids", "int64", [5])],
        outputs=[
            TensorSignature("scores", "float32", [3]),
            TensorSignature("label", "int64", []),
        ],
        postprocess="softmax",
    )


def test_resolve_builder_finds_zoo_builders_and_import_paths() -> None:
    assert resolve_builder("mnist_cnn") is mnist_cnn
    builder = resolve_builder(f"{CUSTOM}:two_in_two_out")
    assert isinstance(builder(), torch.nn.Module)


@pytest.mark.parametrize(
    ("architecture", "message"),
    [
        ("resnet51", "neither a zoo builder"),
        ("no_such_package.module:build", "cannot import"),
        (f"{CUSTOM}:missing", "has no 'missing'"),
        (f"{CUSTOM}:NOT_CALLABLE", "not callable"),
    ],
)
def test_resolve_builder_explains_failures(architecture: str, message: str) -> None:
    with pytest.raises(UnknownModel, match=message):
        resolve_builder(architecture)


def test_build_module_rejects_bad_kwargs() -> None:
    manifest = ZOO["mnist"].manifest()
    bad = PackageManifest(
        name="m",
        architecture="mnist_cnn",
        inputs=manifest.inputs,
        outputs=manifest.outputs,
        arch_kwargs={"depth": 3},
    )
    with pytest.raises(UnknownModel, match="arch_kwargs"):
        build_module(bad)


def test_meta_build_allocates_nothing_and_is_in_eval_mode() -> None:
    module = build_module(ZOO["resnet-50"].manifest(), device="meta")
    assert not module.training
    assert all(t.is_meta for t in module.state_dict().values())


def test_priming_imports_every_builder_family_without_starting_threads() -> None:
    threads_before = sum(1 for _ in Path("/proc/self/task").iterdir())
    prime_builders()
    families = {BUILDERS[entry.builder].partition(":")[0] for entry in ZOO.values()}
    assert families <= set(sys.modules)
    assert sum(1 for _ in Path("/proc/self/task").iterdir()) == threads_before


@pytest.mark.parametrize("name", ["mnist", "ssd", "lstm-2365", "dssm-2365"])
def test_meta_build_plus_assign_equals_a_normal_build(name: str) -> None:
    """ssd has a structural buffer (anchors), lstm flat weights, dssm two inputs."""
    entry = ZOO[name]
    reference = build_seeded_module(entry)
    prefer_onednn(reference)  # the kernels attach_weights gives: results equal to the bit
    state = {k: v.clone() for k, v in reference.state_dict().items()}
    attached = attach_weights(build_module(entry.manifest(), "meta"), state, name)
    inputs = random_inputs(entry.inputs, 3, seed=1)
    with torch.no_grad():
        expected, actual = as_outputs(reference(*inputs)), as_outputs(attached(*inputs))
    for want, got in zip(expected, actual, strict=True):
        assert torch.equal(want, got)


def test_load_model_from_a_built_package(tmp_path: Path) -> None:
    entry = ZOO["textcnn-69"]
    package_dir = build_package(entry.name, tmp_path)
    manifest, module = load_model(package_dir)
    assert manifest.name == entry.name
    assert not module.training
    inputs = random_inputs(entry.inputs, 2)
    with torch.no_grad():
        assert torch.equal(module(*inputs), build_seeded_module(entry)(*inputs))


def _mapped_file(address: int) -> str:
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split()
        low, high = (int(x, 16) for x in fields[0].split("-"))
        if low <= address < high:
            return fields[-1] if len(fields) >= 6 else ""
    return ""


def test_package_weights_are_memory_mapped(tmp_path: Path) -> None:
    package_dir = build_package("resnet-20-cifar", tmp_path)
    manifest, _ = load_model(package_dir)
    state = load_package_weights(package_dir, manifest)
    assert set(state) == set(build_seeded_module(ZOO["resnet-20-cifar"]).state_dict())
    weight = state["layer3.2.conv2.weight"]
    assert weight.device.type == "cpu"
    assert _mapped_file(weight.untyped_storage().data_ptr()) == str(package_dir / WEIGHTS_FILE)


def test_missing_weights_file_is_an_unknown_model(tmp_path: Path) -> None:
    with pytest.raises(UnknownModel, match="missing"):
        load_package_weights(tmp_path, ZOO["mnist"].manifest())


def test_attach_weights_names_missing_tensors() -> None:
    module = build_module(ZOO["mnist"].manifest(), "meta")
    state = build_seeded_module(ZOO["mnist"]).state_dict()
    del state["classifier.3.bias"]
    with pytest.raises(UnknownModel, match=r"classifier\.3\.bias"):
        attach_weights(module, state, "mnist")


def test_attach_weights_refuses_non_persistent_buffers() -> None:
    manifest = PackageManifest(
        name="scratch",
        architecture=f"{CUSTOM}:WithScratchBuffer",
        inputs=[TensorSignature("x", "float32", [4])],
        outputs=[TensorSignature("y", "float32", [2])],
    )
    state = build_module(manifest, "cpu").state_dict()
    with pytest.raises(UnknownModel, match="scratch"):
        attach_weights(build_module(manifest, "meta"), state, "scratch")


def test_user_architecture_package_with_two_inputs_and_outputs(tmp_path: Path) -> None:
    manifest = _custom_manifest()
    reference = build_module(manifest, "cpu")
    save_file(reference.state_dict(), str(tmp_path / WEIGHTS_FILE))
    (tmp_path / MANIFEST_FILE).write_bytes(encode_manifest(manifest))
    loaded_manifest, module = load_model(tmp_path)
    assert loaded_manifest == manifest
    inputs = random_inputs(manifest.inputs, 4)
    inputs[1] = inputs[1] % 11
    with torch.no_grad():
        scores, label = as_outputs(module(*inputs))
        want_scores, want_label = as_outputs(reference(*inputs))
    assert torch.equal(scores, want_scores)
    assert label.dtype == torch.int64
    assert torch.equal(label, want_label)
    processed = apply_postprocess("softmax", {"scores": scores, "label": label})
    torch.testing.assert_close(processed["scores"].sum(dim=1), torch.ones(4))
    assert torch.equal(processed["label"], label)  # integer outputs pass through


def test_postprocess_steps() -> None:
    logits = torch.tensor([[0.0, 1.0, -2.0]])
    softmax = apply_postprocess("softmax", {"p": logits})["p"]
    torch.testing.assert_close(softmax.sum(), torch.tensor(1.0))
    sigmoid = apply_postprocess("sigmoid", {"p": logits})["p"]
    torch.testing.assert_close(sigmoid[0, 0], torch.tensor(0.5))
    with pytest.raises(UnknownModel, match="known steps"):
        apply_postprocess("argmax", {"p": logits})


def test_postprocess_names_match_the_manifest_validation() -> None:
    assert set(POSTPROCESS_STEPS) == POSTPROCESS_NAMES


def test_attached_models_run_pointwise_convolutions_on_onednn() -> None:
    entry = ZOO["mobilenet"]
    module = attach_weights(build_meta_module(entry), build_seeded_module(entry).state_dict(), "m")
    retyped = [m for m in module.modules() if isinstance(m, OneDnnPointwiseConv2d)]
    assert len(retyped) == 13  # one pointwise convolution per depthwise-separable layer

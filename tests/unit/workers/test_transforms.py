"""Model variants' transforms in the worker: each answers like the fp32 model, in the
signature's dtypes; a transform that does not fit the model says so."""

from __future__ import annotations

from pathlib import Path

import msgspec
import numpy as np
import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from infless.errors import UnknownModel
from infless.models.package import (
    MANIFEST_FILE,
    WEIGHTS_FILE,
    PackageManifest,
    TensorSignature,
    encode_manifest,
    load_manifest,
)
from infless.workers import protocol as p
from infless.workers.handling import Arrays
from infless.workers.model import build_model
from infless.workers.transforms import TransformNotApplicable, apply_transform
from tests.support.torch_threads import one_torch_thread  # noqa: F401 - applies here

HERE = "tests.unit.workers.test_transforms"


class TinyClassifier(nn.Module):
    """Features -> scores and the argmax class (an integer output)."""

    def __init__(self) -> None:
        super().__init__()
        self.hidden = nn.Linear(6, 16)
        self.head = nn.Linear(16, 3)

    def forward(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        scores: torch.Tensor = self.head(torch.relu(self.hidden(features)))
        return scores, scores.argmax(dim=1)


class TinyConvNet(nn.Module):
    def __init__(self, head: bool = True) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d(2)
        self.head = nn.Linear(16, 5) if head else nn.Identity()

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self.pool(torch.relu(self.conv(image))).flatten(1))
        return out


class TinyLstm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embedding = nn.Embedding(20, 8)
        self.lstm = nn.LSTM(8, 16, batch_first=True)
        self.head = nn.Linear(16, 3)

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        _, (hidden, _) = self.lstm(self.embedding(token_ids))
        out: torch.Tensor = self.head(hidden[-1])
        return out


def tiny_classifier() -> nn.Module:
    return TinyClassifier()


def _manifest(kind: str, transform: str = "") -> PackageManifest:
    if kind == "classifier":
        inputs = [TensorSignature("features", "float32", [6])]
        outputs = [TensorSignature("scores", "float32", [3]), TensorSignature("label", "int64", [])]
    elif kind == "lstm":
        inputs = [TensorSignature("token_ids", "int64", [7])]
        outputs = [TensorSignature("scores", "float32", [3])]
    else:
        inputs = [TensorSignature("image", "float32", [3, 8, 8])]
        outputs = [TensorSignature("scores", "float32", [5 if kind == "conv" else 16])]
    return PackageManifest(
        name=kind, architecture="test", inputs=inputs, outputs=outputs, transform=transform
    )


def _model(kind: str) -> nn.Module:
    torch.manual_seed(0)
    models: dict[str, nn.Module] = {
        "classifier": TinyClassifier(),
        "conv": TinyConvNet(),
        "conv-only": TinyConvNet(head=False),
        "lstm": TinyLstm(),
    }
    return models[kind].eval()


def _inputs(kind: str, batch_size: int = 4) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(batch_size)
    if kind == "classifier":
        return [torch.randn(batch_size, 6, generator=generator)]
    if kind == "lstm":
        return [torch.randint(0, 20, (batch_size, 7), generator=generator)]
    return [torch.randn(batch_size, 3, 8, 8, generator=generator)]


def _first(output: object) -> torch.Tensor:
    if isinstance(output, tuple | list):
        output = output[0]
    assert isinstance(output, torch.Tensor)
    return output


def _compare(kind: str, transform: str, atol: float, batch_sizes: tuple[int, ...] = (4,)) -> None:
    reference = _model(kind)
    transformed = apply_transform(_model(kind), transform, _manifest(kind))
    for batch_size in batch_sizes:
        inputs = _inputs(kind, batch_size)
        with torch.inference_mode():
            want, got = reference(*inputs), transformed(*inputs)
        assert type(got) is type(want)
        assert _first(got).dtype == torch.float32
        assert _first(got).shape == _first(want).shape
        torch.testing.assert_close(_first(got), _first(want), atol=atol, rtol=0.0)


@pytest.mark.parametrize("kind", ["classifier", "conv", "lstm"])
def test_bf16_answers_like_fp32_in_float32(kind: str) -> None:
    _compare(kind, "bf16", atol=5e-2)


def test_bf16_keeps_integer_inputs_and_outputs() -> None:
    transformed = apply_transform(_model("classifier"), "bf16", _manifest("classifier"))
    with torch.inference_mode():
        scores, label = transformed(*_inputs("classifier"))
    assert scores.dtype == torch.float32
    assert label.dtype == torch.int64
    assert torch.equal(label, scores.argmax(dim=1))
    lstm = apply_transform(_model("lstm"), "bf16", _manifest("lstm"))
    with torch.inference_mode():  # token ids stay integers: an embedding takes nothing else
        assert lstm(*_inputs("lstm")).dtype == torch.float32


@pytest.mark.parametrize("kind", ["classifier", "conv", "lstm"])
def test_int8_answers_close_to_fp32(kind: str) -> None:
    _compare(kind, "int8", atol=0.1)
    transformed = apply_transform(_model(kind), "int8", _manifest(kind))
    kinds = {type(m).__module__ for m in transformed.modules()}
    assert any(".quantized." in name for name in kinds)


def test_int8_does_not_apply_to_a_model_without_linear_or_recurrent_layers() -> None:
    with pytest.raises(TransformNotApplicable, match="no Linear/LSTM/GRU layer"):
        apply_transform(_model("conv-only"), "int8", _manifest("conv-only"))


def test_channels_last_converts_image_inputs_and_answers_alike() -> None:
    _compare("conv", "channels-last", atol=1e-5)
    transformed = apply_transform(_model("conv"), "channels-last", _manifest("conv"))
    weight = next(m for m in transformed.modules() if isinstance(m, nn.Conv2d)).weight
    assert weight.is_contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize("kind", ["classifier", "lstm"])
def test_channels_last_does_not_apply_without_an_image_input(kind: str) -> None:
    with pytest.raises(TransformNotApplicable, match="4-D floating input"):
        apply_transform(_model(kind), "channels-last", _manifest(kind))


@pytest.mark.parametrize("kind", ["classifier", "conv", "lstm"])
def test_torchscript_traces_once_and_serves_any_batch(kind: str) -> None:
    _compare(kind, "torchscript", atol=1e-5, batch_sizes=(1, 4, 5))
    transformed = apply_transform(_model(kind), "torchscript", _manifest(kind))
    assert any(isinstance(m, torch.jit.ScriptModule) for m in transformed.modules())


class BakedBatch(nn.Module):
    """Reshapes with a Python int of the batch size: a trace keeps the traced batch's."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(6, 3)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        rows = int(features.shape[0])
        out: torch.Tensor = self.linear(features).reshape(rows, 3)
        return out.new_ones(2, 3) * out.sum() if rows == 2 else out


def test_torchscript_refuses_a_trace_that_baked_its_batch_in() -> None:
    manifest = _manifest("classifier")
    with pytest.raises(RuntimeError, match="torchscript"):
        apply_transform(BakedBatch().eval(), "torchscript", manifest)


def test_compile_answers_like_fp32() -> None:
    # slow: inductor compiles two graphs (batch 1, and any batch above) in ~10-30 s
    _compare("classifier", "compile", atol=1e-5, batch_sizes=(1, 3, 6))


def _write_package(directory: Path, transform: str) -> Path:
    directory.mkdir()
    manifest = PackageManifest(
        name="tiny",
        architecture=f"{HERE}:tiny_classifier",
        inputs=[TensorSignature("features", "float32", [6])],
        outputs=[TensorSignature("scores", "float32", [3]), TensorSignature("label", "int64", [])],
        postprocess="softmax",
        transform=transform,
    )
    torch.manual_seed(3)
    save_file(TinyClassifier().state_dict(), str(directory / WEIGHTS_FILE))
    (directory / MANIFEST_FILE).write_bytes(encode_manifest(manifest))
    return directory


def test_build_model_applies_the_manifest_transform(tmp_path: Path) -> None:
    plain, _ = build_model(p.LoadModel(str(_write_package(tmp_path / "fp32", "fp32")), cpus=1))
    variant, _ = build_model(p.LoadModel(str(_write_package(tmp_path / "bf16", "bf16")), cpus=1))
    assert variant.manifest.transform == "bf16"
    assert any(t.dtype == torch.bfloat16 for t in variant.module.parameters())
    assert all(t.dtype == torch.float32 for t in plain.module.parameters())
    rows: Arrays = {"features": np.random.default_rng(0).standard_normal((5, 6)).astype(np.float32)}
    want, got = plain.forward(rows), variant.forward(rows)
    assert got["scores"].dtype == np.float32
    assert got["label"].dtype == np.int64
    scores, wanted = (np.asarray(o["scores"], dtype=np.float64) for o in (got, want))
    np.testing.assert_allclose(scores, wanted, atol=5e-2)
    ready = variant.run(variant.example_inputs(3))
    variant.check_outputs(ready, 3)


def test_transform_on_a_program_package_does_not_apply(tmp_path: Path) -> None:
    package = _write_package(tmp_path / "script", "fp32")
    manifest = load_manifest(package)
    document = msgspec.structs.replace(
        manifest, format="torchscript", program_file="model.pt", transform="bf16"
    )
    (package / MANIFEST_FILE).write_bytes(encode_manifest(document))
    with pytest.raises(TransformNotApplicable, match="'module' packages"):
        build_model(p.LoadModel(str(package), cpus=1))


def test_an_unknown_transform_is_refused_when_the_manifest_is_read(tmp_path: Path) -> None:
    package = _write_package(tmp_path / "odd", "fp32")
    document = msgspec.structs.replace(load_manifest(package), transform="fp8")
    (package / MANIFEST_FILE).write_bytes(encode_manifest(document))
    with pytest.raises(UnknownModel, match="transform 'fp8' is unknown"):
        load_manifest(package)

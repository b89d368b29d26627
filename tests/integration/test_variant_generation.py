"""Generating a model's variants: packages written next to the fp32 one, each profiled in a
process of its own; a transform that does not fit, or a variant that fails or crashes, never
stops the others."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import msgspec
import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from infless.modelless.generate import generate
from infless.modelless.profiles import GenerationResult, VariantProfile, variant_function
from infless.models.package import (
    MANIFEST_FILE,
    WEIGHTS_FILE,
    PackageManifest,
    TensorSignature,
    encode_manifest,
    load_manifest,
)
from infless.weights.store import TensorStore
from infless.workers import protocol as p
from infless.workers.zygote import ZygoteLauncher
from tests.support.gateway import TEST_MODEL_REPOSITORY
from tests.support.workers import exchange

MODEL = "textcnn-69"


@pytest.fixture(scope="module")
def out_dir() -> Iterator[Path]:
    """Next to the test model repository: the same file system, so weights are hard links."""
    TEST_MODEL_REPOSITORY.parent.mkdir(parents=True, exist_ok=True)
    directory = Path(tempfile.mkdtemp(prefix="test-variants-", dir=TEST_MODEL_REPOSITORY.parent))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="module")
def textcnn(out_dir: Path, built_models: None) -> GenerationResult:
    return generate(
        TEST_MODEL_REPOSITORY / MODEL,
        MODEL,
        out_dir / MODEL,
        generate_samples=64,
        variants=["fp32", "bf16", "int8", "channels-last", "torchscript"],
        max_batch=8,
        cpus=[1],
    )


def _variant(result: GenerationResult, name: str) -> VariantProfile:
    return next(v for v in result.variants if v.name == name)


def test_every_ready_variant_is_profiled_and_packaged(textcnn: GenerationResult) -> None:
    assert textcnn.model == MODEL
    assert textcnn.metric == "top1-agreement"
    assert textcnn.variants[0].name == "fp32"
    fp32 = _variant(textcnn, "fp32")
    assert fp32.status == "ready", fp32.error
    assert fp32.accuracy == 1.0
    for name in ("bf16", "int8"):
        variant = _variant(textcnn, name)
        assert variant.status == "ready", variant.error
        assert variant.accuracy is not None
        assert 0.0 < variant.accuracy <= 1.0
    ready = [v for v in textcnn.variants if v.status == "ready"]
    assert {v.name for v in ready} == {"fp32", "bf16", "int8", "torchscript"}
    for variant in ready:
        assert {(p.batch_size, p.cpus) for p in variant.latency} == {(b, 1) for b in (1, 2, 4, 8)}
        assert all(p.measured_ms > 0 for p in variant.latency)
        assert all(p.predicted_ms is None for p in variant.latency)  # no profiles given
        assert variant.load_ms is not None
        assert variant.load_ms > 0
        assert variant.peak_memory_bytes is not None
        assert variant.peak_memory_bytes > 0
        manifest = load_manifest(Path(variant.package_dir))
        assert manifest.transform == variant.name
        assert manifest.name == variant_function(MODEL, variant.name)


def test_variant_weights_are_hard_links_of_the_fp32_package(
    textcnn: GenerationResult, out_dir: Path
) -> None:
    source = (TEST_MODEL_REPOSITORY / MODEL / WEIGHTS_FILE).stat()
    int8 = (Path(_variant(textcnn, "int8").package_dir) / WEIGHTS_FILE).stat()
    fp32 = (Path(_variant(textcnn, "fp32").package_dir) / WEIGHTS_FILE).stat()
    assert source.st_dev == int8.st_dev  # the fixture put them on one file system
    assert int8.st_ino == fp32.st_ino == source.st_ino


def test_a_transform_that_does_not_fit_is_not_applicable(
    textcnn: GenerationResult, out_dir: Path
) -> None:
    channels_last = _variant(textcnn, "channels-last")
    assert channels_last.status == "not-applicable"
    assert "4-D floating input" in channels_last.error
    assert channels_last.latency == []
    assert channels_last.package_dir == ""
    assert not (out_dir / MODEL / "channels-last").exists()  # only servable variants stay


async def test_zygote_workers_serve_the_variants_from_the_shared_store(
    textcnn: GenerationResult, store: TensorStore, zygote: ZygoteLauncher
) -> None:
    ids = np.random.default_rng(0).integers(0, 100, (3, 69)).astype(np.int64)
    run = p.RunBatch(1, {"token_ids": p.TensorData("int64", [3, 69], ids.tobytes())})
    answers: dict[str, np.ndarray] = {}
    for name in ("fp32", "bf16", "int8", "torchscript"):
        package = Path(_variant(textcnn, name).package_dir)
        stored = await asyncio.to_thread(store.publish, package, "t", holder=name)
        worker = await zygote.launch(name)
        try:
            worker.sock.setblocking(False)
            load = p.LoadModel(
                str(package), cpus=1, store_tensors=stored, warmup_batch_sizes=[1, 4]
            )
            ready = await exchange(worker, load)
            assert isinstance(ready, p.Ready), ready
            assert set(ready.exec_ms) == {1, 4}  # the transformed model was warmed and timed
            result = await exchange(worker, run)
            assert isinstance(result, p.BatchResult), result
            (output,) = result.outputs.values()
            assert output.dtype == "float32"
            answers[name] = np.frombuffer(output.data, np.float32).reshape(output.shape)
        finally:
            loop = asyncio.get_running_loop()
            await loop.sock_sendall(worker.sock, p.encode_frame(p.Shutdown()))
            assert await zygote.wait_exit(worker.pid) == 0
            worker.sock.close()
    np.testing.assert_allclose(answers["torchscript"], answers["fp32"], atol=1e-4)
    np.testing.assert_allclose(answers["bf16"], answers["fp32"], atol=0.1)
    np.testing.assert_allclose(answers["int8"], answers["fp32"], atol=0.2)


# A user package (its source in src/) whose variants go wrong in chosen ways.
MODEL_SOURCE = """
import os
import sys

import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, mode: str = "") -> None:
        super().__init__()
        self.mode = mode
        self.linear = nn.Linear(6, 3)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        weight = self.linear.weight
        if self.mode == "crash-in-bf16" and isinstance(weight, torch.Tensor):
            if weight.dtype == torch.bfloat16:
                print("bf16 crashes this process", file=sys.stderr, flush=True)
                os._exit(3)
        if self.mode == "broken":
            raise RuntimeError("this model never answers")
        rows = int(features.shape[0])  # a Python int: a trace bakes its batch size in
        out: torch.Tensor = self.linear(features).reshape(rows, 3)
        return out


def build(mode: str = "") -> nn.Module:
    return Model(mode)
"""

HANDLER_SOURCE = """
import numpy as np


class Handler:
    def __init__(self, package_dir):
        self.package_dir = package_dir

    def preprocess(self, request):
        values = [float(v) for v in request.text().split()]
        return {"features": np.asarray(values, dtype=np.float32)}

    def postprocess(self, outputs):
        return outputs["scores"].tolist()
"""


def _user_package(directory: Path, mode: str = "", handler: bool = False) -> Path:
    (directory / "src").mkdir(parents=True)
    (directory / "src" / "varmodel.py").write_text(MODEL_SOURCE)
    (directory / "src" / "varhandler.py").write_text(HANDLER_SOURCE)
    (directory / "labels.txt").write_text("a\nb\nc\n")  # any other file the handler reads
    manifest = PackageManifest(
        name="usermodel",
        architecture="varmodel:build",
        arch_kwargs={"mode": mode},
        inputs=[TensorSignature("features", "float32", [6])],
        outputs=[TensorSignature("scores", "float32", [3])],
        handler="varhandler:Handler" if handler else None,
    )
    torch.manual_seed(0)
    state = {"linear.weight": torch.randn(3, 6), "linear.bias": torch.randn(3)}
    save_file(state, str(directory / WEIGHTS_FILE))
    (directory / MANIFEST_FILE).write_bytes(encode_manifest(manifest))
    return directory


def test_failing_and_crashing_variants_do_not_stop_the_others(tmp_path: Path) -> None:
    package = _user_package(tmp_path / "pkg", mode="crash-in-bf16")
    result = generate(
        package,
        "user",
        tmp_path / "out",
        generate_samples=16,
        variants=["bf16", "int8", "torchscript"],  # fp32 is always made, first
        max_batch=2,
        cpus=[1],
        budget_s=0.05,
    )
    assert [v.name for v in result.variants] == ["fp32", "bf16", "int8", "torchscript"]
    fp32, bf16, int8, torchscript = result.variants
    assert fp32.status == "ready", fp32.error
    assert int8.status == "ready", int8.error
    assert int8.accuracy is not None
    assert 0.0 < int8.accuracy <= 1.0
    assert bf16.status == "failed"  # the process died: its exit status and last words
    assert "exited 3" in bf16.error
    assert "bf16 crashes this process" in bf16.error
    assert torchscript.status == "failed"  # the trace baked its batch size in
    assert torchscript.error.startswith("RuntimeError")
    assert not (tmp_path / "out" / "bf16").exists()
    int8_dir = Path(int8.package_dir)
    assert (int8_dir / "src" / "varmodel.py").read_text() == MODEL_SOURCE
    assert (int8_dir / "labels.txt").read_text() == "a\nb\nc\n"


def test_when_fp32_fails_every_variant_fails_with_its_error(tmp_path: Path) -> None:
    package = _user_package(tmp_path / "pkg", mode="broken")
    result = generate(
        package, "user", tmp_path / "out", generate_samples=4, variants=["fp32", "int8"]
    )
    fp32, int8 = result.variants
    assert fp32.status == int8.status == "failed"
    assert "this model never answers" in fp32.error
    assert int8.error == f"fp32 failed: {fp32.error}"
    assert not any((tmp_path / "out").iterdir())


def test_request_bodies_through_the_handler_score_by_cosine(tmp_path: Path) -> None:
    package = _user_package(tmp_path / "pkg", handler=True)
    rng = np.random.default_rng(1)
    lines = [" ".join(f"{v:.3f}" for v in rng.standard_normal(6)) for _ in range(10)]
    validation = tmp_path / "requests.txt"
    validation.write_text("\n".join(lines) + "\n")
    result = generate(
        package,
        "user",
        tmp_path / "out",
        validation=validation,
        variants=["fp32", "bf16"],
        max_batch=4,
        cpus=[1],
        budget_s=0.05,
    )
    assert result.metric == "cosine"
    fp32, bf16 = result.variants
    assert fp32.status == bf16.status == "ready", (fp32.error, bf16.error)
    assert fp32.accuracy == pytest.approx(1.0)
    assert bf16.accuracy is not None
    assert 0.99 < bf16.accuracy <= 1.0


def test_labels_in_the_validation_set_score_top1(tmp_path: Path) -> None:
    package = _user_package(tmp_path / "pkg")
    features = np.random.default_rng(2).standard_normal((12, 6)).astype(np.float32)
    torch.manual_seed(0)
    weight, bias = torch.randn(3, 6).numpy(), torch.randn(3).numpy()
    predicted = np.argmax(features @ weight.T + bias, axis=1)
    labels = predicted.copy()
    labels[:3] = (labels[:3] + 1) % 3  # three of twelve wrong
    validation = tmp_path / "set.npz"
    np.savez(validation, features=features, labels=labels)
    result = generate(
        package,
        "user",
        tmp_path / "out",
        validation=validation,
        variants=["fp32"],
        max_batch=4,
        cpus=[1],
        budget_s=0.05,
    )
    assert result.metric == "top1-labels"
    assert result.variants[0].accuracy == pytest.approx(0.75)
    decoded = msgspec.json.decode(msgspec.json.encode(result), type=GenerationResult)
    assert decoded == result


def test_the_command_prints_progress_then_the_result_last(tmp_path: Path) -> None:
    import subprocess
    import sys

    package = _user_package(tmp_path / "pkg")
    done = subprocess.run(
        [
            sys.executable, "-m", "infless.modelless.generate", "--package", str(package),
            "--model", "user", "--out", str(tmp_path / "out"), "--generate", "8",
            "--variants", "fp32", "--max-batch", "2", "--cpus", "1", "--budget-s", "0.05",
        ],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )  # fmt: skip
    *progress, last = done.stdout.splitlines()
    result = msgspec.json.decode(last, type=GenerationResult)
    assert result.variants[0].status == "ready"
    assert "fp32: ready" in done.stderr
    assert [msgspec.json.decode(line)["progress"] for line in progress] == [
        {"done": 0, "total": 1, "step": "fp32: writing and profiling"},  # what register shows
        {"done": 1, "total": 1, "step": "done"},
    ]


def test_operator_profiles_predict_fp32_and_calibrate_the_others(tmp_path: Path) -> None:
    import subprocess
    import sys

    package = TEST_MODEL_REPOSITORY / "mnist"
    state = tmp_path / "state"
    subprocess.run(
        [
            sys.executable, "-m", "infless.cli", "profile", str(package), "--state-dir",
            str(state), "--quick", "--max-threads", "1", "--budget-ms", "20",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    result = generate(
        package,
        "mnist",
        tmp_path / "out",
        generate_samples=8,
        variants=["fp32", "int8"],
        max_batch=4,
        cpus=[1],
        budget_s=0.05,
        state_dir=state,
    )
    fp32, int8 = result.variants
    assert fp32.status == int8.status == "ready", (fp32.error, int8.error)
    predicted = [p.predicted_ms for p in fp32.latency]
    assert all(ms is not None and ms > 0 for ms in predicted)
    fp32_b1, int8_b1 = fp32.latency_ms(1, 1), int8.latency_ms(1, 1)
    assert fp32_b1 is not None
    assert int8_b1 is not None
    for ours, theirs in zip(int8.latency, fp32.latency, strict=True):  # one-point calibration
        assert theirs.predicted_ms is not None
        assert ours.predicted_ms == pytest.approx(theirs.predicted_ms * int8_b1 / fp32_b1)

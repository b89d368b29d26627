"""`infless.package`: every kind of model it takes becomes a package that loads and runs as
a worker would, and every kind of mistake is a PackagingError naming it."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

import infless
from infless.models.package import load_manifest
from infless.packaging.digest import package_digest
from infless.packaging.verify import PackagingError
from infless.workers import protocol as p
from infless.workers.model import build_model
from tests.support.gateway import REPO_ROOT

PROJECT = REPO_ROOT / "tests" / "fixtures" / "userproject"


@pytest.fixture(autouse=True)
def user_project() -> Iterator[None]:
    sys.path.insert(0, str(PROJECT))
    yield
    sys.path.remove(str(PROJECT))
    for name in [m for m in sys.modules if m == "tinynet" or m.startswith("tinynet.")]:
        del sys.modules[name]


def _served(package_dir: Path, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The package as a worker builds it (meta + attach, or the program), run on `batch`."""
    model, _ = build_model(p.LoadModel(package_dir=str(package_dir), cpus=1))
    return model.forward(batch)


def test_an_instance_with_its_kwargs_round_trips(tmp_path: Path) -> None:
    from tinynet.net import TinyNet

    torch.manual_seed(3)
    model = TinyNet(width=8)
    x = torch.randn(5, 4)
    info = infless.package(
        model, x, name="iris", out=tmp_path / "iris", arch_kwargs={"width": 8}, outputs=["scores"]
    )
    manifest = load_manifest(info.path)
    assert manifest.architecture == "tinynet.net:TinyNet"
    assert manifest.arch_kwargs == {"width": 8}
    assert [s.describe() for s in manifest.input_specs] == ["features: float32[4]"]
    assert [s.describe() for s in manifest.output_specs] == ["scores: float32[3]"]
    assert manifest.digest == info.digest == package_digest(info.path)
    assert info.verified is not None
    assert info.verified.batch_sizes == [5, 1]
    with torch.inference_mode():
        expected = model(x).numpy()
    got = _served(info.path, {"features": x.numpy()})["scores"]
    np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_missing_kwargs_fail_at_attaching_the_weights(tmp_path: Path) -> None:
    from tinynet.net import TinyNet

    with pytest.raises(
        PackagingError,
        match=r"tensor shapes differ: stem.weight is \[8, 4\] in the weights, \[16, 4\] built",
    ):
        infless.package(TinyNet(width=8), torch.randn(2, 4), name="iris", out=tmp_path / "x")
    assert not (tmp_path / "x").exists()  # nothing half-written is left


def test_builder_path_with_a_weights_file_and_dynamic_inputs(tmp_path: Path) -> None:
    from tinynet.odd import TwoInputs

    torch.manual_seed(0)
    trained = TwoInputs()
    torch.save(trained.state_dict(), tmp_path / "trained.pt")
    ids = torch.tensor([[3, 4, 5, 0], [7, 8, 0, 0]])
    mask = (ids > 0).to(torch.int64)
    info = infless.package(
        "tinynet.odd:TwoInputs",
        {"mask": mask, "ids": ids},  # by name: put in the forward's order
        name="pool",
        out=tmp_path / "pool",
        weights=tmp_path / "trained.pt",
        dynamic={"ids": [0], "mask": [0]},
    )
    manifest = info.manifest
    assert [s.describe() for s in manifest.input_specs] == ["ids: int64[*]", "mask: int64[*]"]
    assert [s.describe() for s in manifest.output_specs] == [
        "pooled: float32[6]",
        "tokens: int64[]",
    ]
    longer = {"ids": np.array([[1, 2, 3, 4, 5, 6]]), "mask": np.ones((1, 6), dtype=np.int64)}
    with torch.inference_mode():
        expected = trained(torch.from_numpy(longer["ids"]), torch.from_numpy(longer["mask"]))
    got = _served(info.path, longer)
    np.testing.assert_allclose(got["pooled"], expected["pooled"].numpy(), rtol=1e-6)
    assert got["tokens"].tolist() == [6]

    (tmp_path / "bad.pt").write_bytes(b"")
    torch.save({**trained.state_dict(), "extra.weight": torch.zeros(1)}, tmp_path / "bad.pt")
    with pytest.raises(PackagingError, match=r"extra tensors \['extra.weight'\]"):
        infless.package(
            "tinynet.odd:TwoInputs", (ids, mask), name="pool", out=tmp_path / "bad",
            weights=tmp_path / "bad.pt",
        )  # fmt: skip


def test_torchscript_and_export_programs(tmp_path: Path) -> None:
    from tinynet.net import TinyNet

    model = TinyNet().eval()
    x = torch.randn(3, 4)
    with torch.inference_mode():
        expected = model(x).numpy()
    with pytest.deprecated_call():  # TorchScript is deprecated in torch 2.13, still served
        script = torch.jit.script(model)
    scripted = infless.package(script, x, name="ts", out=tmp_path / "ts")
    assert scripted.manifest.format == "torchscript"
    assert scripted.manifest.input_specs[0].name == "features"
    np.testing.assert_allclose(_served(scripted.path, {"features": x.numpy()})["output"], expected)

    batch = torch.export.Dim("batch")
    program = torch.export.export(model, (x,), dynamic_shapes={"features": {0: batch}})
    torch.export.save(program, tmp_path / "model.pt2")
    exported = infless.package(tmp_path / "model.pt2", x, name="ep", out=tmp_path / "ep")
    assert exported.manifest.format == "export"
    np.testing.assert_allclose(
        _served(exported.path, {"features": x.numpy()[:1]})["output"], expected[:1], rtol=1e-6
    )

    fixed = torch.export.export(model, (x,))  # its batch size is baked in: not servable
    with pytest.raises(PackagingError, match=r"forward on the example \(batch of 1\)"):
        infless.package(fixed, x, name="ep", out=tmp_path / "fixed")


@pytest.mark.parametrize(
    ("make", "words"),
    [
        ("transient", r"non-persistent buffers \['scale'\]"),
        ("failing", r"forward on the example \(batch of 1\).*cannot take a batch of one"),
        ("main", "defined in __main__"),
        ("local", "defined inside a function"),
    ],
)
def test_what_a_worker_could_not_serve_is_named(tmp_path: Path, make: str, words: str) -> None:
    from tinynet.odd import Failing, WithTransientBuffer

    model: torch.nn.Module
    if make == "transient":
        model = WithTransientBuffer()
    elif make == "failing":
        model = Failing()
    else:

        class Local(torch.nn.Linear):
            def __init__(self) -> None:
                super().__init__(4, 3)

        if make == "main":
            Local.__module__ = "__main__"
        model = Local()
    with pytest.raises(PackagingError, match=words):
        infless.package(model, torch.randn(2, 4), name="odd", out=tmp_path / "odd")


def test_a_handler_runs_on_the_example_request(tmp_path: Path) -> None:
    from tinynet.net import TinyNet

    info = infless.package(
        TinyNet(),
        torch.randn(2, 4),
        name="iris",
        out=tmp_path / "iris",
        outputs=["scores"],
        handler="tinynet.handler:Handler",
        example_request=json.dumps({"features": [1, 2, 3, 4]}),
    )
    assert info.verified is not None
    assert info.verified.answer is not None
    assert json.loads(info.verified.answer)["label"] in ("setosa", "versicolor", "virginica")
    assert info.source_files == [
        "tinynet/__init__.py",
        "tinynet/handler.py",
        "tinynet/layers.py",
        "tinynet/net.py",
    ]
    assert any(r.startswith("numpy==") for r in info.manifest.requirements)
    with pytest.raises(PackagingError, match=r"example request.*answered 400.*4 numbers"):
        infless.package(
            TinyNet(), torch.randn(2, 4), name="iris", out=tmp_path / "again",
            outputs=["scores"], handler="tinynet.handler:Handler", example_request="[1]",
        )  # fmt: skip


def test_out_must_be_a_package_or_empty(tmp_path: Path) -> None:
    from tinynet.net import TinyNet

    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "notes.txt").write_text("mine")
    with pytest.raises(PackagingError, match="not a function package: refusing"):
        infless.package(TinyNet(), torch.randn(2, 4), name="x", out=tmp_path / "docs")
    assert (tmp_path / "docs" / "notes.txt").read_text() == "mine"


def test_an_architecture_that_does_not_import_is_named(tmp_path: Path) -> None:
    with pytest.raises(PackagingError, match=r"importing tinynet\.missing: ModuleNotFoundError"):
        infless.package("tinynet.missing:build", torch.randn(2, 4), name="x", out=tmp_path / "x")
    with pytest.raises(PackagingError, match=r"tinynet\.net has no 'nothing'"):
        infless.package("tinynet.net:nothing", torch.randn(2, 4), name="x", out=tmp_path / "x")

"""Bring your own model, as a user would: `infless package` a project of their own
(tests/fixtures/userproject), `infless deploy -f` its stack file (the package is uploaded),
call it with raw bodies through its handler and with V2 BYTES; and the same package loaded
through tritonclient's `load_model(files=...)`; and the progress `package` and `deploy`
show on a terminal, and not in a script."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from infless.packaging.digest import package_digest
from tests.support.gateway import REPO_ROOT, GatewayProcess, start_gateway
from tests.support.terminal import run_on_terminal

PROJECT = REPO_ROOT / "tests" / "fixtures" / "userproject"
STACK = """\
provider:
  name: infless
  gateway: {url}
functions:
  iris:
    image: ./tinynet
    latency_target: 100ms
"""
SAMPLE = {"features": [5.1, 3.5, 1.4, 0.2]}


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "infless.cli", *args],
        cwd=cwd, capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The user's working directory, with the package `infless package` made in it."""
    work = tmp_path_factory.mktemp("user")
    done = _cli(
        "package", "--arch", "tinynet.net:build", "--arch-kwargs", '{"width": 8}',
        "--input", "features:float32:4", "--output", "scores",
        "--handler", "tinynet.handler:Handler", "--example-request", json.dumps(SAMPLE),
        "--content-type", "application/json", "--json", "-o", str(work / "tinynet"),
        cwd=PROJECT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["source"] == [
        "tinynet/__init__.py",
        "tinynet/handler.py",
        "tinynet/layers.py",
        "tinynet/net.py",
    ]
    assert report["verified_batch_sizes"] == [2, 1]
    return work


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    root = tmp_path_factory.mktemp("gateway")
    with start_gateway(root, sections={"models": {"repository": str(root / "models")}}) as gw:
        yield gw


def test_package_deploy_curl(workdir: Path, gateway: GatewayProcess) -> None:
    (workdir / "stack.yml").write_text(STACK.format(url=gateway.url))
    deployed = _cli("deploy", "-f", "stack.yml", cwd=workdir)
    assert deployed.returncode == 0, deployed.stderr
    digest = package_digest(workdir / "tinynet")
    assert f"uploaded iris {digest}" in deployed.stdout
    gateway.wait_ready("iris")

    headers = {"Content-Type": "application/json"}
    status, answer_headers, body = gateway.request(
        "POST", "/function/iris", raw=json.dumps(SAMPLE).encode(), headers=headers
    )
    assert status == 200, body
    answer = json.loads(body)
    assert answer["label"] in ("setosa", "versicolor", "virginica")
    assert len(answer["scores"]) == 3
    assert answer_headers["Content-Type"].startswith("application/json")
    assert answer_headers["X-Infless-Batch-Size"] == "1"

    status, _, body = gateway.request(
        "POST", "/function/iris", raw=b'{"features": [1, 2]}', headers=headers
    )
    assert status == 400
    assert json.loads(body) == {
        "error": "features must be 4 numbers, got shape [2]",
        "code": "handler_error",
    }

    metadata = gateway.json("GET", "/v2/models/iris")
    assert metadata["inputs"] == [{"name": "body", "datatype": "BYTES", "shape": [-1, 1]}]
    assert metadata["outputs"] == [{"name": "scores", "datatype": "FP32", "shape": [-1, 3]}]
    rows = [json.dumps(SAMPLE), json.dumps({"features": [6, 3, 5, 2]})]
    infer = {"inputs": [{"name": "body", "datatype": "BYTES", "shape": [2, 1], "data": rows}]}
    (output,) = gateway.json("POST", "/v2/models/iris/infer", infer)["outputs"]
    assert output["name"] == "scores"
    assert output["shape"] == [2, 3]
    assert output["data"][:3] == pytest.approx(answer["scores"], rel=1e-5)

    bad = {"inputs": [{"name": "body", "datatype": "BYTES", "shape": [1], "data": ["{}"]}]}
    status, _, body = gateway.request("POST", "/v2/models/iris/infer", bad)
    assert status == 400
    assert "features" in json.loads(body)["error"]


def test_the_package_through_tritonclient(workdir: Path, gateway: GatewayProcess) -> None:
    package = workdir / "tinynet"
    files = {
        f"file:{path.relative_to(package).as_posix()}": path.read_bytes()
        for path in package.rglob("*")
        if path.is_file()
    }
    triton = httpclient.InferenceServerClient(url=gateway.url.removeprefix("http://"))
    try:
        triton.load_model("iris-triton", files=files, config=json.dumps({}))
        gateway.wait_ready("iris-triton")
        assert triton.is_model_ready("iris-triton")
        body = httpclient.InferInput("body", [2, 1], "BYTES")
        body.set_data_from_numpy(
            np.array([[json.dumps(SAMPLE).encode()], [b'{"features": [6, 3, 5, 2]}']], object)
        )
        result = triton.infer("iris-triton", [body]).as_numpy("scores")
    finally:
        triton.close()
    assert result is not None
    assert result.shape == (2, 3)
    status, _, answer = gateway.request(
        "POST", "/function/iris-triton", raw=json.dumps(SAMPLE).encode()
    )
    assert status == 200, answer
    np.testing.assert_allclose(result[0], json.loads(answer)["scores"], rtol=1e-5)


def test_package_and_deploy_show_progress_on_a_terminal_only(
    workdir: Path, gateway: GatewayProcess
) -> None:
    """On a terminal a bar shows the steps (packaging, verifying; hashing, packing,
    uploading); piped, and with --quiet, nothing of it appears."""
    package = [
        sys.executable, "-m", "infless.cli", "package", "--arch", "tinynet.net:build",
        "--arch-kwargs", '{"width": 16}', "--input", "features:float32:4",
        "--handler", "tinynet.handler:Handler", "-o", str(workdir / "wide"),
    ]  # fmt: skip
    shown = run_on_terminal(package, PROJECT)
    assert shown.returncode == 0, shown.terminal
    assert "packaging wide" in shown.terminal
    assert "verifying it loads and runs as a worker would" in shown.terminal
    assert "packaged wide" in shown.stdout
    deploy = [
        sys.executable, "-m", "infless.cli", "deploy", "--name", "wide", "--image", "./wide",
        "--gateway", gateway.url,
    ]  # fmt: skip
    shown = run_on_terminal(deploy, workdir)
    assert shown.returncode == 0, shown.terminal
    assert "wide: uploading" in shown.terminal
    assert " MiB" in shown.terminal
    assert "uploaded wide sha256:" in shown.stdout

    quiet = run_on_terminal([*deploy, "--quiet"], workdir)
    assert quiet.returncode == 0
    assert quiet.terminal == ""
    assert "wide: already on the gateway" in quiet.stdout
    piped = subprocess.run(
        [*package[:-1], str(workdir / "piped")], cwd=PROJECT, capture_output=True, text=True,
        check=False, timeout=300,
    )  # fmt: skip
    assert piped.returncode == 0, piped.stderr
    assert piped.stderr == ""
    assert "\x1b[" not in piped.stdout

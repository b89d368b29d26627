"""Deploying from anywhere, on a real gateway with basic auth and its own model repository:
`infless deploy` uploads a local package directory once and deploys it by digest;
tritonclient's `load_model(files=...)` deploys the files it sends; malicious archives get
a 4xx, write nothing outside the repository, and the gateway keeps serving."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from infless.packaging.digest import package_digest
from infless.packaging.store import STAGING_PREFIX
from tests.support.gateway import TEST_MODEL_REPOSITORY, GatewayProcess, start_gateway
from tests.support.tarballs import entry, good_entries, tarball, zeros_member

PASSWORD = "upload-secret"
AUTH = {"Authorization": "Basic " + base64.b64encode(f"admin:{PASSWORD}".encode()).decode()}
LIMIT = 1 << 20  # gateway.max_package_bytes here: mnist's package is ~75 KB
SAMPLE = {"inputs": np.zeros((1, 28, 28)).tolist()}
MNIST = TEST_MODEL_REPOSITORY / "mnist"
STACK = """\
provider:
  name: infless
  gateway: {url}
functions:
  digits:
    image: ./digits-pkg
    latency_target: 200ms
"""


@dataclass
class Setup:
    gw: GatewayProcess
    root: Path
    repository: Path


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    root = tmp_path_factory.mktemp("upload")
    repository = root / "repository"
    sections: dict[str, dict[str, object]] = {
        "models": {"repository": str(repository)},
        "auth": {"basic_auth": True, "password": PASSWORD},
        "gateway": {"max_package_bytes": LIMIT},
    }
    with start_gateway(root, sections=sections) as gw:
        yield Setup(gw, root, repository)


def _wait_ready(gw: GatewayProcess, name: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status, _, body = gw.request("GET", f"/system/instances?function={name}", headers=AUTH)
        assert status == 200, body
        if any(i["state"] == "ready" for i in json.loads(body)):
            return
        time.sleep(0.1)
    raise AssertionError(f"{name} never became ready")


def _function(gw: GatewayProcess, name: str) -> dict[str, object]:
    status, _, body = gw.request("GET", f"/system/function/{name}", headers=AUTH)
    assert status == 200, body
    result: dict[str, object] = json.loads(body)
    return result


def _deploy(setup: Setup, stack: Path) -> subprocess.CompletedProcess[str]:
    credentials = ["--gateway", setup.gw.url, "--username", "admin", "--password", PASSWORD]
    return subprocess.run(
        [sys.executable, "-m", "infless.cli", "deploy", "-f", str(stack), *credentials],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=setup.root,  # not the stack's directory: ./digits-pkg is relative to the stack
        env={**os.environ, "INFLESS_CONFIG_DIR": str(setup.root / "cli")},
    )


def _staging_left(setup: Setup) -> list[Path]:
    packages = setup.repository / "packages"
    return [p for p in packages.iterdir() if p.name.startswith(STAGING_PREFIX)]


def test_deploy_uploads_a_local_package_once(setup: Setup) -> None:
    gw = setup.gw
    stack_dir = setup.root / "stack"
    shutil.copytree(MNIST, stack_dir / "digits-pkg")
    digest = package_digest(stack_dir / "digits-pkg")
    stack = stack_dir / "stack.yml"
    stack.write_text(STACK.format(url=gw.url), encoding="utf-8")

    first = _deploy(setup, stack)
    assert first.returncode == 0, first.stderr
    assert f"uploaded digits {digest}" in first.stdout
    assert "Deployed digits" in first.stdout
    assert _function(gw, "digits")["image"] == digest
    _wait_ready(gw, "digits")
    status, _, body = gw.request("POST", "/function/digits", SAMPLE)
    assert status == 200, body
    outputs = json.loads(body)["outputs"]
    assert len(outputs) == 10
    assert sum(outputs) == pytest.approx(1.0, abs=1e-4)  # the package's softmax

    again = _deploy(setup, stack)
    assert again.returncode == 0, again.stderr
    assert "digits: already on the gateway" in again.stdout
    assert "uploaded" not in again.stdout
    stored = sorted(p.name for p in (setup.repository / "packages").iterdir())
    assert digest.removeprefix("sha256:") in stored
    status, _, manifest = gw.request("GET", f"/system/packages/{digest}", headers=AUTH)
    assert status == 200
    assert json.loads(manifest)["name"] == "mnist"
    assert gw.request("GET", f"/system/packages/{digest}")[0] == 401  # management: basic auth


def test_tritonclient_load_model_with_files(setup: Setup) -> None:
    triton = httpclient.InferenceServerClient(url=setup.gw.url.removeprefix("http://"))
    try:
        files = {f"file:1/{p.name}": p.read_bytes() for p in MNIST.iterdir() if p.is_file()}
        config = json.dumps({"labels": {"com.infless.max.batch": "4"}})
        triton.load_model("tri-digits", headers=AUTH, config=config, files=files)
        status = _function(setup.gw, "tri-digits")
        assert status["image"] == package_digest(MNIST)
        assert status["maxBatch"] == 4
        image = httpclient.InferInput("image", [2, 1, 28, 28], "FP32")
        image.set_data_from_numpy(np.zeros((2, 1, 28, 28), dtype=np.float32))
        result = triton.infer("tri-digits", [image], headers=AUTH).as_numpy("probabilities")
        assert result is not None
        assert result.shape == (2, 10)
        with pytest.raises(InferenceServerException, match=r"'\.\.' is not allowed") as refused:
            triton.load_model("evil", headers=AUTH, config="{}", files={"file:../../x": b"x"})
        assert refused.value.status() == "400"
    finally:
        triton.close()
    assert _staging_left(setup) == []


def test_malicious_archives_are_refused_and_the_gateway_keeps_serving(setup: Setup) -> None:
    gw = setup.gw
    outside = setup.root / "outside"
    outside.mkdir()
    gzip = {**AUTH, "Content-Type": "application/gzip"}
    cases: list[tuple[bytes, int, str]] = [
        (tarball(*good_entries(), entry("passwd", b"2", link="/etc/passwd")), 422, "symlink"),
        (tarball(*good_entries(), entry("hard", b"1", link="manifest.json")), 422, "hard link"),
        (tarball(entry("../../evil", data=b"x")), 422, "'..'"),
        (tarball(entry(str(outside / "evil"), data=b"x")), 422, "absolute"),
        (tarball(*good_entries(), entry("dev/null", tarfile.CHRTYPE)), 422, "a device"),
        (tarball(zeros_member("bomb", LIMIT + 1)), 413, "gateway.max_package_bytes"),
        (tarball(entry("weights.safetensors", data=b"w")), 422, "manifest.json"),
        (tarball(*good_entries(name=7)), 422, "manifest.json"),
        (b"\x1f\x8b definitely not gzip", 400, "not a readable tar archive"),
        (os.urandom(LIMIT + 1), 413, "gateway.max_package_bytes"),
    ]
    for body, expected, words in cases:
        status, _, reply = gw.request("POST", "/system/packages", headers=gzip, raw=body)
        assert status == expected, (words, reply)
        assert words in json.loads(reply)["error"], reply
    status, _, _ = gw.request("POST", "/system/packages", headers=AUTH, raw=b"x")
    assert status == 415  # urllib's default form type is no archive

    assert _staging_left(setup) == []
    assert list(outside.iterdir()) == []
    assert not (setup.root / "evil").exists()
    assert not (setup.repository.parent / "evil").exists()
    assert gw.process.poll() is None
    assert gw.request("GET", "/healthz")[0] == 200
    status, _, reply = gw.request(
        "POST", "/system/packages", headers=gzip, raw=tarball(*good_entries())
    )
    assert status == 201, reply
    assert gw.request("GET", "/system/functions", headers=AUTH)[0] == 200

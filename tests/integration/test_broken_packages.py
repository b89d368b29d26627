"""Packages that cannot serve — code that raises at import, a model answering shapes its
signature does not declare, a warm-up that never ends — leave their function `failed` with
the reason, while the gateway and the other functions keep serving."""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from safetensors.torch import save_file

from tests.support.gateway import REPO_ROOT, GatewayProcess, start_gateway

PROJECT = REPO_ROOT / "tests" / "fixtures" / "userproject"


def _package(tmp_path: Path, name: str, net_source: str, outputs: list[int] | None = None) -> Path:
    """A package of TinyNet whose net.py is replaced by `net_source` (as it could be edited
    after packaging), optionally declaring other output dimensions."""
    package = tmp_path / name
    (package / "src").mkdir(parents=True)
    shutil.copytree(PROJECT / "tinynet", package / "src" / "tinynet")
    (package / "src" / "tinynet" / "net.py").write_text(net_source)
    manifest = {
        "name": name,
        "architecture": "tinynet.net:TinyNet",
        "inputs": [{"name": "features", "dtype": "float32", "shape": [4]}],
        "outputs": [{"name": "scores", "dtype": "float32", "shape": outputs or [3]}],
        "weights_file": "weights.safetensors",
    }
    (package / "manifest.json").write_text(json.dumps(manifest))
    shutil.copyfile(_weights(tmp_path), package / "weights.safetensors")
    return package


def _weights(tmp_path: Path) -> Path:
    """TinyNet's seeded weights as safetensors (built here: weights are never committed)."""
    path = tmp_path / "tinynet.safetensors"
    sys.path.insert(0, str(PROJECT))
    try:
        from tinynet.net import TinyNet

        save_file({k: v.contiguous() for k, v in TinyNet().state_dict().items()}, str(path))
    finally:
        sys.path.remove(str(PROJECT))
    return path


GOOD_NET = (PROJECT / "tinynet" / "net.py").read_text()


def _wait_failed(gateway: GatewayProcess, name: str, timeout_s: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = gateway.json("GET", f"/system/function/{name}")
        if status["state"] == "failed":
            return dict(status)
        time.sleep(0.1)
    raise AssertionError(f"{name} never showed failed: {status}")


@pytest.mark.parametrize(
    ("net_source", "outputs", "reason", "logged"),
    [
        (
            'raise RuntimeError("broken on purpose")\n',
            None,
            "broken on purpose",
            'raise RuntimeError("broken on purpose")',
        ),
        (
            GOOD_NET,
            [5],
            "output 'scores' is float32[1, 3] for a batch of 1",
            "model.check_outputs(model.run(example), batch_size)",
        ),
        (
            GOOD_NET.replace(
                "        scores: torch.Tensor =",
                "        import time\n        time.sleep(600)\n        scores: torch.Tensor =",
            ),
            None,
            "not ready after 5 s",
            None,
        ),
    ],
    ids=["raises-at-import", "wrong-output-shape", "never-warms-up"],
)
def test_a_broken_package_fails_alone(
    tmp_path: Path, net_source: str, outputs: list[int] | None, reason: str, logged: str | None
) -> None:
    broken = _package(tmp_path, "broken", net_source, outputs)
    functions = [
        {"name": "mnist", "image": "mnist", "instances": 1},
        {"name": "broken", "image": str(broken), "instances": 1},
    ]
    sections = {"workers": {"start_timeout_s": 5.0}}
    with start_gateway(tmp_path, functions, sections, wait_for_functions=False) as gateway:
        gateway.wait_ready("mnist")
        status = _wait_failed(gateway, "broken")
        assert reason in status["lastError"]
        if logged is not None:  # the worker's traceback, in the function's logs
            _, _, logs = gateway.request("GET", "/system/logs?name=broken")
            texts = [json.loads(line)["text"] for line in logs.splitlines() if line.strip()]
            assert any("Traceback (most recent call last)" in t for t in texts), texts
            assert any(logged in t for t in texts), texts
        code, _, body = gateway.request("POST", "/function/broken", {"inputs": [1, 2, 3, 4]})
        assert code == 503, body
        assert gateway.request("POST", "/function/mnist", {"inputs": [[[0.0] * 28] * 28]})[0] == 200

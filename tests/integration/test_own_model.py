"""Bring your own model: `infless package` a user's project (tests/fixtures/userproject),
serve it with its handler, call it with raw bodies and with V2 BYTES."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.gateway import REPO_ROOT, start_gateway

PROJECT = REPO_ROOT / "tests" / "fixtures" / "userproject"


@pytest.fixture(scope="module")
def tinynet_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("packages") / "tinynet"
    done = subprocess.run(
        [
            sys.executable, "-m", "infless.cli", "package",
            "--arch", "tinynet.net:build", "--arch-kwargs", '{"width": 8}',
            "--input", "features:float32:4", "--output", "scores",
            "--handler", "tinynet.handler:Handler",
            "--example-request", '{"features": [1, 2, 3, 4]}',
            "--content-type", "application/json", "--json", "-o", str(out),
        ],
        cwd=PROJECT, capture_output=True, text=True, check=False,
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
    return out


def test_packaged_model_answers_raw_bodies_through_its_handler(
    tmp_path: Path, tinynet_package: Path
) -> None:
    function = {"name": "iris", "image": str(tinynet_package), "instances": 1}
    with start_gateway(tmp_path, [function]) as gateway:
        headers = {"Content-Type": "application/json"}
        status, answer_headers, body = gateway.request(
            "POST", "/function/iris", raw=b'{"features": [5.1, 3.5, 1.4, 0.2]}', headers=headers
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
        rows = [
            json.dumps({"features": [5.1, 3.5, 1.4, 0.2]}),
            json.dumps({"features": [6, 3, 5, 2]}),
        ]
        infer = {"inputs": [{"name": "body", "datatype": "BYTES", "shape": [2, 1], "data": rows}]}
        result = gateway.json("POST", "/v2/models/iris/infer", infer)
        (output,) = result["outputs"]
        assert output["name"] == "scores"
        assert output["shape"] == [2, 3]
        assert output["data"][:3] == pytest.approx(answer["scores"], rel=1e-5)

        bad = {"inputs": [{"name": "body", "datatype": "BYTES", "shape": [1], "data": ["{}"]}]}
        status, _, body = gateway.request("POST", "/v2/models/iris/infer", bad)
        assert status == 400
        assert "features" in json.loads(body)["error"]

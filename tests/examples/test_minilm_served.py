"""The minilm example served by a real gateway: text over curl-like HTTP and V2 BYTES in,
embeddings out, with the model's known similarities."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from build_package import export

from tests.support.gateway import GatewayProcess, start_gateway

from .test_minilm import PARAPHRASES, UNRELATED


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return export(tmp_path_factory.mktemp("packages"))


def _embed(gateway: GatewayProcess, sentence: str) -> np.ndarray:
    # what `curl -d 'A man is eating food.'` sends
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    status, _, body = gateway.request(
        "POST", "/function/minilm", raw=sentence.encode(), headers=headers
    )
    assert status == 200, body
    answer = json.loads(body)
    assert answer["dimensions"] == 384
    return np.asarray(answer["embedding"], dtype=np.float64)


def test_minilm_answers_text_and_v2_bytes(tmp_path: Path, package: Path) -> None:
    function = {"name": "minilm", "image": str(package), "instances": 1, "slo_ms": 200}
    with start_gateway(tmp_path, [function]) as gateway:
        food = _embed(gateway, "A man is eating food.")
        assert np.linalg.norm(food) == pytest.approx(1.0, abs=1e-5)
        for first, second, expected in [*PARAPHRASES, *UNRELATED]:
            cosine = float(_embed(gateway, first) @ _embed(gateway, second))
            assert cosine == pytest.approx(expected, abs=2e-3), (first, second)

        sentences = ["A man is eating food.", "The new movie is awesome."]
        infer = {
            "inputs": [{"name": "body", "datatype": "BYTES", "shape": [2, 1], "data": sentences}]
        }
        (output,) = gateway.json("POST", "/v2/models/minilm/infer", infer)["outputs"]
        assert output["name"] == "embedding"
        assert output["shape"] == [2, 384]
        rows = np.asarray(output["data"]).reshape(2, 384)
        np.testing.assert_allclose(rows[0], food, atol=1e-5)

        status, _, body = gateway.request("POST", "/function/minilm", raw=b"   ")
        assert status == 400
        assert "empty" in json.loads(body)["error"]

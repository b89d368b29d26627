"""`infless serve --config` with a function whose image is missing (as `config.toml`'s
minilm is before its package is built): the gateway starts and serves the other functions,
the broken one is `failed` with its reason wherever a user looks, and readiness means what
Kubernetes and tritonclient take it to mean — once `is_server_ready` is true,
`is_model_ready` is true for every function that did not fail."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import tritonclient.http as httpclient

from tests.support.gateway import start_gateway

pytestmark = pytest.mark.timeout(180)

MISSING = "examples/minilm/build/not-built"
FUNCTIONS = [
    {"name": "digits", "image": "mnist", "slo_ms": 500, "max_batch": 4},
    {"name": "minilm", "image": MISSING, "slo_ms": 100, "max_batch": 8},
    {"name": "text", "image": "textcnn-69", "slo_ms": 500, "max_batch": 4},
]
DIGIT = {"inputs": [[[0.5] * 28] * 28]}


def test_a_missing_image_fails_its_function_alone_and_readiness_is_consistent(
    tmp_path: Path,
) -> None:
    with start_gateway(tmp_path, FUNCTIONS, wait_for_functions=False) as gw:
        triton = httpclient.InferenceServerClient(url=gw.url.removeprefix("http://"))
        try:
            deadline = time.monotonic() + 120
            while not triton.is_server_ready():
                status, _, body = gw.request("GET", "/readyz")
                assert set(json.loads(body)["failed"]) == {"minilm"}  # reported, not awaited
                if status == 200:  # it became ready between the two probes
                    break
                assert status == 503, body
                assert time.monotonic() < deadline, body
                time.sleep(0.05)
            # right after the server is ready, so is every function that did not fail
            assert triton.is_model_ready("digits")
            assert triton.is_model_ready("text")
            assert not triton.is_model_ready("minilm")
            assert triton.is_server_live()
        finally:
            triton.close()

        status, _, body = gw.request("GET", "/readyz")
        assert status == 200, body
        assert MISSING in json.loads(body)["failed"]["minilm"]
        listed = {f["name"]: f for f in gw.json("GET", "/system/functions")}
        assert listed["minilm"]["state"] == "failed"
        assert MISSING in listed["minilm"]["lastError"]
        assert {listed["digits"]["state"], listed["text"]["state"]} == {"ready"}
        assert gw.json("GET", "/system/function/minilm")["state"] == "failed"

        status, _, body = gw.request("POST", "/function/minilm", raw=b"A man is eating food.")
        assert status == 503, body
        error = json.loads(body)
        assert error["code"] == "function_failed"
        assert "'minilm'" in error["error"]
        assert MISSING in error["error"]
        status, _, body = gw.request("POST", "/function/digits", DIGIT)
        assert status == 200, body
        assert gw.process.poll() is None

"""The gateway over real HTTP with real workers: the OpenFaaS API, invoke, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tests.support.gateway import GatewayProcess, start_gateway

MNIST_SAMPLE = {"inputs": np.full((1, 28, 28), 0.5).tolist()}


def _deployment(name: str, image: str = "mnist", **labels: str) -> dict[str, object]:
    return {
        "service": name,
        "image": image,
        "labels": {"com.infless.max.batch": "4", **labels},
        "annotations": {"com.infless.latency_target": "100ms"},
    }


def _invoke(gw: GatewayProcess, name: str, body: object) -> tuple[int, dict[str, str], object]:
    status, headers, payload = gw.request("POST", f"/function/{name}", body)
    return status, headers, json.loads(payload)


def test_deploy_invoke_scale_list_remove_over_http(tmp_path: Path) -> None:
    with start_gateway(tmp_path) as gw:
        status, _, _ = gw.request("PUT", "/system/functions", _deployment("digits"))
        assert status == 404  # faas-cli's cue to POST
        status, _, body = gw.request("POST", "/system/functions", _deployment("digits"))
        assert status == 202, body
        status, _, _ = gw.request("POST", "/system/functions", _deployment("digits"))
        assert status == 409
        gw.wait_ready("digits")

        status, headers, answer = _invoke(gw, "digits", MNIST_SAMPLE)
        assert status == 200
        assert isinstance(answer, dict)
        probabilities = answer["outputs"]
        assert len(probabilities) == 10
        assert abs(sum(probabilities) - 1.0) < 1e-4
        assert headers["X-Infless-Batch-Size"] == "1"
        assert headers["X-Infless-Cold-Start"] == "false"
        assert float(headers["X-Duration-Seconds"]) > 0
        assert headers["X-Call-Id"]
        assert headers["X-Infless-Instance"].startswith("digits-")

        status, _, _ = gw.request(
            "POST", "/system/scale-function/digits", {"serviceName": "digits", "replicas": 3}
        )
        assert status == 202
        ready = gw.wait_ready("digits", 3)
        assert len({i["pid"] for i in ready}) == 3

        listed = gw.json("GET", "/system/functions")
        (digits,) = [f for f in listed if f["name"] == "digits"]
        assert digits["replicas"] == 3
        assert digits["availableReplicas"] == 3
        assert digits["invocationCount"] == 1.0
        assert digits["signature"]["inputs"] == [
            {"name": "image", "dtype": "float32", "shape": [1, 28, 28]}
        ]
        assert digits["createdAt"].endswith("Z")

        status, _, _ = gw.request("DELETE", "/system/functions", {"functionName": "digits"})
        assert status == 202
        assert gw.request("GET", "/system/function/digits")[0] == 404
        assert gw.instances("digits") == []


def test_bad_input_gets_precise_json_errors_and_the_gateway_keeps_serving(tmp_path: Path) -> None:
    functions = [{"name": "mnist", "image": "mnist", "slo_ms": 100, "max_batch": 4}]
    sections = {"gateway": {"max_body_bytes": 65536}}
    with start_gateway(tmp_path, functions, sections) as gw:
        cases: list[tuple[str, str, bytes, int, str]] = [
            ("POST", "/function/mnist", b"{broken", 400, "malformed_body"),
            (
                "POST",
                "/function/nope",
                json.dumps(MNIST_SAMPLE).encode(),
                404,
                "function_not_found",
            ),
            ("POST", "/function/mnist", b'{"inputs": [1, 2, 3]}', 422, "input_mismatch"),
            ("POST", "/function/mnist", b'{"inputs": "text"}', 422, "input_mismatch"),
            ("POST", "/function/mnist", b"[" + b"1," * 40000 + b"1]", 413, "payload_too_large"),
            ("POST", "/system/functions", b'{"image": "mnist"}', 400, "invalid_deployment"),
            (
                "POST",
                "/system/functions",
                b'{"service": "x", "image": "no-such-model"}',
                400,
                "unknown_model",
            ),
            (
                "POST",
                "/system/functions",
                b'{"service": "Bad Name", "image": "mnist"}',
                400,
                "invalid_deployment",
            ),
            (
                "POST",
                "/system/scale-function/mnist",
                b'{"replicas": "two"}',
                400,
                "invalid_deployment",
            ),
            (
                "DELETE",
                "/system/functions",
                b'{"functionName": "ghost"}',
                404,
                "function_not_found",
            ),
        ]
        for method, path, raw, expected_status, code in cases:
            status, headers, payload = gw.request(method, path, raw=raw)
            assert status == expected_status, (path, raw[:40], status, payload)
            assert headers["Content-Type"].startswith("application/json")
            error = json.loads(payload)
            assert error["code"] == code
            assert error["error"]
        status, _, answer = _invoke(gw, "mnist", MNIST_SAMPLE)
        assert status == 200
        assert isinstance(answer, dict)
        assert len(answer["outputs"]) == 10


def test_health_info_and_metrics(tmp_path: Path) -> None:
    functions = [{"name": "mnist", "image": "mnist", "slo_ms": 100, "max_batch": 4}]
    with start_gateway(tmp_path, functions) as gw:
        assert gw.request("GET", "/healthz")[0] == 200
        info = gw.json("GET", "/system/info")
        assert info["provider"]["version"]["release"]
        assert info["version"]["sha"]
        for _ in range(3):
            assert _invoke(gw, "mnist", MNIST_SAMPLE)[0] == 200
        _, _, text = gw.request("GET", "/metrics")
        metrics = text.decode()
        assert 'gateway_function_invocation_total{code="200",function_name="mnist"} 3.0' in metrics
        assert 'gateway_function_invocation_started{function_name="mnist"} 3.0' in metrics
        assert 'gateway_service_count{function_name="mnist"} 1.0' in metrics
        assert 'gateway_functions_seconds_count{code="200",function_name="mnist"} 3.0' in metrics

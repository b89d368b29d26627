"""Real workers under concurrent load: batching happens, SIGKILL loses nothing, restarts keep
the registry, and overload is a 429 rather than an unbounded wait."""

from __future__ import annotations

import json
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from tests.support.gateway import GatewayProcess, start_gateway

IMAGE = {"inputs": np.full((3, 32, 32), 0.25).tolist()}
TOKENS = {"inputs": list(range(1, 70))}


def _fire(
    gw: GatewayProcess, name: str, body: object, count: int, workers: int = 32
) -> list[tuple[int, dict[str, str], bytes]]:
    with ThreadPoolExecutor(workers) as pool:
        futures = [pool.submit(gw.request, "POST", f"/function/{name}", body) for _ in range(count)]
        return [f.result() for f in futures]


def test_concurrent_requests_are_batched(tmp_path: Path) -> None:
    functions = [{"name": "textcnn", "image": "textcnn-69", "slo_ms": 2000, "max_batch": 8}]
    with start_gateway(tmp_path, functions) as gw:
        results = _fire(gw, "textcnn", TOKENS, count=64)
        assert all(status == 200 for status, _, _ in results)
        sizes = [int(headers["X-Infless-Batch-Size"]) for _, headers, _ in results]
        assert max(sizes) > 1
        # every batch-size header is consistent: a batch of k was reported by k requests
        outputs = np.array([json.loads(body)["outputs"] for _, _, body in results])
        # same input, same answer whatever the batch (kernels may round the last bits apart)
        np.testing.assert_allclose(outputs, np.broadcast_to(outputs[0], outputs.shape), rtol=1e-5)
        (instance,) = gw.instances("textcnn")
        assert instance["served"] == 64
        assert instance["batches"] < 64


def test_sigkill_mid_batch_loses_no_request_and_the_instance_is_replaced(tmp_path: Path) -> None:
    functions = [
        {"name": "cifar", "image": "resnet-20", "slo_ms": 20000, "max_batch": 4, "instances": 2}
    ]
    with start_gateway(tmp_path, functions) as gw:
        with ThreadPoolExecutor(24) as pool:
            futures = [pool.submit(gw.request, "POST", "/function/cifar", IMAGE) for _ in range(24)]
            victim = None
            deadline = time.monotonic() + 30
            while victim is None and time.monotonic() < deadline:
                busy = [i for i in gw.instances("cifar") if i["inFlight"] > 0]
                victim = busy[0] if busy else None
            assert victim is not None, "no batch was ever in flight"
            os.kill(victim["pid"], signal.SIGKILL)
            results = [f.result() for f in futures]
        statuses = [status for status, _, _ in results]
        assert statuses == [200] * 24, statuses
        # answers from the victim are fine (its batch may have finished before the kill)
        replacement = gw.wait_ready("cifar", 2)
        assert victim["pid"] not in {i["pid"] for i in replacement}
        assert gw.request("POST", "/function/cifar", IMAGE)[0] == 200


def test_restart_keeps_the_registry(tmp_path: Path) -> None:
    state = tmp_path / "state"
    deployment = {
        "service": "kept",
        "image": "mnist",
        "labels": {"com.infless.max.batch": "2", "com.openfaas.scale.min": "1"},
        "annotations": {"com.infless.latency_target": "80ms"},
    }
    with start_gateway(tmp_path, state_dir=state) as gw:
        assert gw.request("POST", "/system/functions", deployment)[0] == 202
        gw.wait_ready("kept")
        assert gw.request("POST", "/system/scale-function/kept", {"replicas": 2})[0] == 202
        gw.wait_ready("kept", 2)
    with start_gateway(tmp_path, state_dir=state) as gw:
        status = gw.json("GET", "/system/function/kept")
        assert status["latencyTargetMs"] == 80.0
        assert status["maxBatch"] == 2
        assert status["replicas"] == 2
        gw.wait_ready("kept", 2)
        sample = {"inputs": np.zeros((1, 28, 28)).tolist()}
        assert gw.request("POST", "/function/kept", sample)[0] == 200


def test_overload_answers_429_with_retry_after_and_recovers(tmp_path: Path) -> None:
    # a tight SLO: the queue bound stays at the configured 2 batches (no room to extend it)
    functions = [{"name": "cifar", "image": "resnet-20", "slo_ms": 20, "max_batch": 1}]
    sections = {"batching": {"queue_capacity_batches": 2, "warmup_rounds": 1}}
    with start_gateway(tmp_path, functions, sections) as gw:
        results = _fire(gw, "cifar", IMAGE, count=40, workers=40)
        statuses = [status for status, _, _ in results]
        assert 429 in statuses
        assert set(statuses) <= {200, 429}
        for status, headers, body in results:
            if status == 429:
                assert int(headers["Retry-After"]) >= 1
                assert json.loads(body)["code"] == "overloaded"
        assert gw.request("POST", "/function/cifar", IMAGE)[0] == 200

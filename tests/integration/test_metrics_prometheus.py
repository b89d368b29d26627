"""`/metrics` as Prometheus parses it: the OpenFaaS families with their exact names and labels,
and infless's per-function series moving after `/function` and `/v2` traffic."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from tests.support.gateway import GatewayProcess, start_gateway

FUNCTIONS = [{"name": "mnist", "image": "mnist", "slo_ms": 100, "max_batch": 4}]
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(gw: GatewayProcess) -> tuple[dict[str, tuple[str, set[str]]], Samples]:
    """(family name -> (type, label names), every sample by name and labels)."""
    status, headers, body = gw.request("GET", "/metrics")
    assert status == 200
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
    families: dict[str, tuple[str, set[str]]] = {}
    samples: Samples = {}
    for family in text_string_to_metric_families(body.decode()):
        names: set[str] = set()
        for sample in family.samples:
            names |= set(sample.labels) - {"le"}
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
        families[family.name] = (family.type, names)
    return families, samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def test_openfaas_names_and_per_function_histograms_move(tmp_path: Path) -> None:
    with start_gateway(tmp_path, FUNCTIONS) as gw:
        families, before = scrape(gw)
        assert families["gateway_service_count"] == ("gauge", {"function_name"})
        assert value(before, "gateway_service_count", function_name="mnist") == 1

        sample = {"inputs": np.full((1, 28, 28), 0.25).tolist()}
        for _ in range(3):
            assert gw.request("POST", "/function/mnist", sample)[0] == 200
        rows = np.random.default_rng(1).random((5, 1, 28, 28)).tolist()
        v2 = {
            "inputs": [{"name": "image", "datatype": "FP32", "shape": [5, 1, 28, 28], "data": rows}]
        }
        assert gw.request("POST", "/v2/models/mnist/infer", v2)[0] == 200
        assert gw.request("POST", "/function/mnist", {"inputs": [1, 2]})[0] == 422

        families, after = scrape(gw)
        # The four OpenFaaS gateway families, verbatim (the parser drops a counter's _total).
        assert families["gateway_function_invocation"] == ("counter", {"function_name", "code"})
        assert families["gateway_functions_seconds"] == ("histogram", {"function_name", "code"})
        assert families["gateway_function_invocation_started"] == ("gauge", {"function_name"})
        assert families["gateway_service_count"] == ("gauge", {"function_name"})
        fn = {"function_name": "mnist"}
        assert value(after, "gateway_function_invocation_total", code="200", **fn) == 4
        assert value(after, "gateway_function_invocation_total", code="422", **fn) == 1
        assert value(after, "gateway_function_invocation_started", **fn) == 5
        assert value(after, "gateway_functions_seconds_count", code="200", **fn) == 4
        assert value(after, "gateway_functions_seconds_sum", code="200", **fn) > 0

        # Per-function, Triton-shaped, base units: every served row moved the histograms.
        for histogram in ("infless_queue_seconds", "infless_exec_seconds", "infless_batch_size"):
            assert families[histogram] == ("histogram", {"function_name"})
            moved = value(after, f"{histogram}_count", **fn) - value(
                before, f"{histogram}_count", **fn
            )
            assert moved == 3 + 5, histogram
            infinite = value(after, f"{histogram}_bucket", le="+Inf", **fn)
            assert infinite == value(after, f"{histogram}_count", **fn)
        assert value(after, "infless_exec_seconds_sum", **fn) > 0
        assert value(after, "infless_inference_count_total", **fn) == 8
        assert value(after, "infless_inference_request_success_total", **fn) == 4
        failure = {"reason": "OTHER", **fn}
        assert value(after, "infless_inference_request_failure_total", **failure) == 1

        # Scrape-time series: instances by config, the worker process, GPUs (none here).
        (instance,) = gw.instances("mnist")
        config = {
            "batch_size": str(instance["batchSize"]),
            "cpus": str(instance["cpus"]),
            "gpu_pct": "0",
            "state": "ready",
            **fn,
        }
        assert value(after, "infless_instances", **config) == 1
        worker = {"instance": instance["id"], **fn}
        assert value(after, "infless_instance_cpu_seconds_total", **worker) > 0
        assert value(after, "infless_instance_memory_rss_bytes", **worker) > 10_000_000
        assert families["infless_gpus"][0] == "gauge"
        assert ("infless_inference_pending_requests", frozenset(fn.items())) in after

"""The faas-cli-style verbs for the new protocols against a real gateway: `metadata`,
`infer`, `metrics`, `describe`, and `logs` (with a worker death to log about)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from tests.support.gateway import GatewayProcess, start_gateway

FUNCTIONS = [{"name": "mnist", "image": "mnist", "slo_ms": 100, "max_batch": 4}]


def _cli(gw: GatewayProcess, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENFAAS_", "INFLESS_"))}
    return subprocess.run(
        [sys.executable, "-m", "infless.cli", *args, "--gateway", gw.url],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )


def test_metadata_infer_metrics_describe_and_logs(tmp_path: Path) -> None:
    with start_gateway(tmp_path, FUNCTIONS) as gw:
        metadata = _cli(gw, "metadata", "mnist")
        assert metadata.returncode == 0, metadata.stderr
        assert "image" in metadata.stdout
        assert "[-1, 1, 28, 28]" in metadata.stdout
        as_json = json.loads(_cli(gw, "metadata", "mnist", "--json").stdout)
        assert as_json["outputs"][0]["name"] == "probabilities"
        assert _cli(gw, "metadata", "ghost").returncode == 1

        rows = np.random.default_rng(3).random((2, 1, 28, 28)).tolist()
        request = {
            "inputs": [{"name": "image", "shape": [2, 1, 28, 28], "datatype": "FP32", "data": rows}]
        }
        path = tmp_path / "request.json"
        path.write_text(json.dumps(request))
        table = _cli(gw, "infer", "mnist", "-f", str(path))
        assert table.returncode == 0, table.stderr
        assert "probabilities" in table.stdout
        assert "[2, 10]" in table.stdout
        answer = json.loads(_cli(gw, "infer", "mnist", "--json", stdin=json.dumps(request)).stdout)
        assert answer["outputs"][0]["shape"] == [2, 10]
        bad = _cli(gw, "infer", "mnist", stdin='{"inputs": [{"name": "image"}]}')
        assert bad.returncode == 1
        assert "400" in bad.stderr

        samples = json.loads(_cli(gw, "metrics", "mnist", "--json").stdout)
        names = {s["name"] for s in samples}
        assert "gateway_function_invocation_total" in names
        assert "infless_queue_seconds_count" in names
        assert all(s["labels"].get("function_name", "mnist") == "mnist" for s in samples)
        assert not any(name.endswith("_bucket") for name in names)
        assert "gateway_service_count" in _cli(gw, "metrics").stdout

        described = _cli(gw, "describe", "mnist")
        assert "Status:" in described.stdout
        assert "Ready" in described.stdout
        assert f"{gw.url}/v2/models/mnist/infer" in described.stdout

        # A worker death is logged by the gateway; `logs` shows it, attributed to the instance.
        (instance,) = gw.instances("mnist")
        os.kill(instance["pid"], signal.SIGKILL)
        deadline = time.monotonic() + 30
        logs = _cli(gw, "logs", "mnist", "--tail=false")
        while "died" not in logs.stdout and time.monotonic() < deadline:
            time.sleep(0.1)
            logs = _cli(gw, "logs", "mnist", "--tail=false")
        assert logs.returncode == 0, logs.stderr
        assert instance["id"] in logs.stdout
        status, headers, body = gw.request("GET", "/system/logs?name=mnist&tail=1")
        assert status == 200
        assert headers["Content-Type"].startswith("application/x-ndjson")
        (entry,) = [json.loads(line) for line in body.splitlines()]
        assert set(entry) == {"name", "namespace", "instance", "timestamp", "text"}
        assert entry["timestamp"].endswith("Z")
        assert gw.request("GET", "/system/logs?name=ghost")[0] == 404
        assert gw.request("GET", "/system/logs")[0] == 400
        gw.wait_ready("mnist")  # replaced after the death

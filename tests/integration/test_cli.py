"""The faas-cli-style CLI on a real gateway: deploy -f stack.yml, invoke, scale, list, remove."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from tests.support.gateway import GatewayProcess, start_gateway

STACK = """\
provider:
  name: infless
  gateway: {url}
functions:
  resnet-digits:
    lang: python3
    handler: ./mnist
    image: mnist
    latency_target: 100ms #SLO
    requests:
      memory: 512Mi
      cpu: 1
    labels:
      com.infless.max.batch: 8
    environment:
      MODEL_NAME: mnist
"""


def _cli(gw: GatewayProcess, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "infless.cli", *args, "--gateway", gw.url],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_cli_lifecycle_from_an_infless_stack_file(tmp_path: Path) -> None:
    with start_gateway(tmp_path) as gw:
        stack = tmp_path / "stack.yml"
        stack.write_text(STACK.format(url=gw.url), encoding="utf-8")
        deployed = _cli(gw, "deploy", "-f", str(stack))
        assert deployed.returncode == 0, deployed.stderr
        assert "Deployed resnet-digits" in deployed.stdout
        gw.wait_ready("resnet-digits")
        status = gw.json("GET", "/system/function/resnet-digits")
        assert status["latencyTargetMs"] == 100.0
        assert status["maxBatch"] == 8
        assert status["envVars"] == {"MODEL_NAME": "mnist"}

        sample = json.dumps({"inputs": np.zeros((1, 28, 28)).tolist()})
        invoked = _cli(gw, "invoke", "resnet-digits", stdin=sample)
        assert invoked.returncode == 0, invoked.stderr
        assert len(json.loads(invoked.stdout)["outputs"]) == 10

        scaled = _cli(gw, "scale", "resnet-digits", "3")
        assert scaled.returncode == 0, scaled.stderr
        gw.wait_ready("resnet-digits", 3)

        listed = _cli(gw, "list")
        assert listed.returncode == 0
        (row,) = [line for line in listed.stdout.splitlines() if line.startswith("resnet-digits")]
        assert row.split()[1:4] == ["1", "3", "3"]  # invocations, replicas, ready
        as_json = json.loads(_cli(gw, "list", "--json").stdout)
        assert as_json[0]["name"] == "resnet-digits"
        instances = _cli(gw, "instances")
        assert instances.stdout.count("resnet-digits-") == 3

        redeployed = _cli(gw, "deploy", "-f", str(stack))  # PUT path: an update, not an error
        assert redeployed.returncode == 0, redeployed.stderr

        removed = _cli(gw, "remove", "resnet-digits")
        assert removed.returncode == 0
        assert _cli(gw, "describe", "resnet-digits").returncode == 1
        failed = _cli(gw, "invoke", "resnet-digits", stdin=sample)
        assert failed.returncode == 1
        assert "404" in failed.stderr

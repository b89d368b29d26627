"""What a function's workers get, with a real gateway and real workers: their stdout and
stderr in the function's logs, the deployment's envVars, its secrets as private files under
/var/openfaas/secrets, and its memory limit (a worker over it is killed and reported)."""

from __future__ import annotations

import asyncio
import json
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from infless.cluster.memory import MemoryLimiter
from infless.workers.isolation import SECRETS_DIR, probe_secrets
from tests.support.fnenv import probe_package
from tests.support.gateway import GatewayProcess, start_gateway

ZEROS = {"inputs": [0.0, 0.0, 0.0, 0.0]}


def _deploy(gw: GatewayProcess, name: str, package: Path, **fields: object) -> None:
    body = {"service": name, "image": str(package), **fields}
    status, _, payload = gw.request("POST", "/system/functions", body)
    assert status == 202, payload


def _outputs(gw: GatewayProcess, name: str, body: object = ZEROS) -> list[float]:
    status, _, payload = gw.request("POST", f"/function/{name}", body)
    assert status == 200, payload
    outputs: list[float] = json.loads(payload)["outputs"]
    return outputs


def _logs(gw: GatewayProcess, name: str) -> list[dict[str, Any]]:
    status, _, payload = gw.request("GET", f"/system/logs?name={name}")
    assert status == 200, payload
    return [json.loads(line) for line in payload.splitlines() if line.strip()]


def _wait_logs(
    gw: GatewayProcess, name: str, done: Callable[[list[str]], bool], timeout_s: float = 20.0
) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    while True:
        entries = _logs(gw, name)
        if done([e["text"] for e in entries]):
            return entries
        assert time.monotonic() < deadline, [e["text"] for e in entries]
        time.sleep(0.1)


def _cli(gw: GatewayProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "infless.cli", *args, "--gateway", gw.url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("launcher", ["zygote", "subprocess"])
def test_what_a_worker_prints_reaches_the_function_logs(tmp_path: Path, launcher: str) -> None:
    package = probe_package(tmp_path / "talker", tmp_path)
    with start_gateway(tmp_path, sections={"workers": {"launcher": launcher}}) as gw:
        _deploy(gw, "talker", package)
        (instance,) = gw.wait_ready("talker")
        assert _outputs(gw, "talker") == [-1.0, 0.0, -1.0]
        entries = _wait_logs(
            gw, "talker", lambda texts: texts.count("forward says hello on stderr") >= 2
        )
        ours = [e["text"] for e in entries if e["instance"] == instance["id"]]
        assert f"fnenv_model imported in pid {instance['pid']}" in ours  # stdout, at import
        assert any("UserWarning: fnenv_model warns at import" in t for t in ours)  # a warning
        assert "forward batch of 1" in ours  # warm-up and the request, stdout
        assert all(e["name"] == "talker" for e in entries)

        printed = _cli(gw, "logs", "talker", "--tail=false")
        assert printed.returncode == 0, printed.stderr
        assert f"{instance['id']} forward says hello on stderr" in printed.stdout


def test_env_vars_reach_the_worker_and_reserved_names_are_refused(tmp_path: Path) -> None:
    package = probe_package(tmp_path / "envprobe", tmp_path, env_name="FNENV_SCALE")
    with start_gateway(tmp_path) as gw:
        for name in ("LD_PRELOAD", "PYTHONPATH", "OMP_NUM_THREADS", "INFLESS_INSTANCE_ID"):
            body = {"service": "envprobe", "image": str(package), "envVars": {name: "x"}}
            status, _, payload = gw.request("POST", "/system/functions", body)
            assert status == 400, payload
            assert f"envVars.{name}" in json.loads(payload)["error"]

        _deploy(gw, "envprobe", package, envVars={"FNENV_SCALE": "2.5"})
        gw.wait_ready("envprobe")
        assert _outputs(gw, "envprobe")[0] == 2.5
        assert gw.json("GET", "/system/function/envprobe")["envVars"] == {"FNENV_SCALE": "2.5"}

        update = {"service": "envprobe", "image": str(package), "envVars": {"FNENV_SCALE": "4"}}
        assert gw.request("PUT", "/system/functions", update)[0] == 202  # new workers
        deadline = time.monotonic() + 30
        while (value := _outputs(gw, "envprobe")[0]) != 4.0 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert value == 4.0

        broken = probe_package(tmp_path / "broken", tmp_path, env_name="FNENV_SCALE")
        _deploy(gw, "broken", broken, envVars={"FNENV_SCALE": "not-a-number"})
        entries = _wait_logs(
            gw, "broken", lambda texts: "Traceback (most recent call last):" in texts
        )  # the worker's own traceback, then the gateway's word on the failed start
        entries = _wait_logs(gw, "broken", lambda texts: any("failed to start" in t for t in texts))
        texts = [e["text"] for e in entries]
        start = texts.index("Traceback (most recent call last):")
        error = "ValueError: could not convert string to float: 'not-a-number'"
        assert error in texts[start:]


def _secrets_unavailable() -> str | None:
    return asyncio.run(probe_secrets())


def test_secrets_are_files_only_their_function_sees(tmp_path: Path) -> None:
    reason = _secrets_unavailable()
    if reason is not None:
        pytest.skip(f"secrets cannot be mounted here: {reason}")
    keeper = probe_package(tmp_path / "keeper", tmp_path, secret="api-key")
    snoop = probe_package(tmp_path / "snoop", tmp_path, secret="api-key")
    value = "s3cr3t-value"
    with start_gateway(tmp_path) as gw:
        status, _, payload = gw.request(
            "POST", "/system/functions", {"service": "keeper", "image": str(keeper),
                                          "secrets": ["api-key"]},
        )  # fmt: skip
        assert status == 400
        assert "'api-key' does not exist" in json.loads(payload)["error"]

        created = _cli(gw, "secret", "create", "api-key", "--from-literal", value)
        assert created.returncode == 0, created.stderr
        assert gw.request("POST", "/system/secrets", {"name": "api-key", "value": "x"})[0] == 409
        listed = gw.request("GET", "/system/secrets")[2]
        assert json.loads(listed) == [{"name": "api-key", "namespace": "openfaas-fn"}]
        stored = gw.state_dir / "secrets" / "api-key"
        assert stat.S_IMODE(stored.stat().st_mode) == 0o600
        assert stat.S_IMODE(stored.parent.stat().st_mode) == 0o700

        _deploy(gw, "keeper", keeper, secrets=["api-key"])
        _deploy(gw, "snoop", snoop)
        (worker,) = gw.wait_ready("keeper")
        gw.wait_ready("snoop")
        assert _outputs(gw, "keeper")[1:] == [1.0, float(sum(value.encode()))]
        assert _outputs(gw, "snoop")[1:] == [0.0, -1.0]  # another function's worker: no file
        assert not (SECRETS_DIR / "api-key").exists()  # nor anywhere outside the worker
        inside = Path(f"/proc/{worker['pid']}/root") / str(SECRETS_DIR).lstrip("/") / "api-key"
        assert stat.S_IMODE(inside.stat().st_mode) == 0o400
        status_body = gw.request("GET", "/system/function/keeper")[2].decode()
        assert json.loads(status_body)["secrets"] == ["api-key"]
        assert value not in status_body
        assert value not in gw.request("GET", "/system/logs?name=keeper")[2].decode()

        assert _cli(gw, "secret", "list").stdout.split() == ["NAME", "api-key"]
        removed = _cli(gw, "secret", "remove", "api-key")
        assert removed.returncode == 0, removed.stderr
        assert json.loads(gw.request("GET", "/system/secrets")[2]) == []


def test_a_worker_over_its_memory_limit_is_killed_and_reported(tmp_path: Path) -> None:
    reason = MemoryLimiter().unavailable
    if reason is not None:
        pytest.skip(f"memory limits cannot be enforced here: {reason}")
    package = probe_package(tmp_path / "hog", tmp_path)
    with start_gateway(tmp_path) as gw:
        status, _, payload = gw.request(
            "POST", "/system/functions", {"service": "hog", "image": str(package),
                                          "limits": {"memory": "12Mi"}},
        )  # fmt: skip
        assert status == 400
        assert "limits.memory = '12Mi'" in json.loads(payload)["error"]

        _deploy(gw, "hog", package, limits={"memory": "160Mi"})
        (first,) = gw.wait_ready("hog")
        assert first["memoryLimit"]["limitBytes"] == 160 * 2**20
        assert _outputs(gw, "hog") == [-1.0, 0.0, -1.0]

        status, _, payload = gw.request("POST", "/function/hog", {"inputs": [400.0, 0, 0, 0]})
        assert status == 503, payload  # its worker died, and so did the retry's
        killed = "killed: out of memory (limit 160 MiB)"
        assert killed in gw.json("GET", "/system/function/hog")["lastError"]
        _wait_logs(gw, "hog", lambda texts: any(killed in t for t in texts))
        assert not Path(f"/proc/{first['pid']}").exists()

        (replacement,) = gw.wait_ready("hog")
        assert replacement["pid"] != first["pid"]
        assert _outputs(gw, "hog") == [-1.0, 0.0, -1.0]  # the gateway keeps serving

"""Start a real `infless serve` subprocess for integration tests, and tear it down cleanly.

The gateway binds port 0; its first stdout line names the URL. Readiness is /healthz and
/system/instances, never a log line. Teardown sends SIGTERM, waits for a graceful drain,
and checks that no worker process outlived the gateway.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

REPO_ROOT = Path(__file__).resolve().parents[2]
# Zoo packages are cached across tests (and runs) here; state/ is gitignored.
TEST_MODEL_REPOSITORY = REPO_ROOT / "state" / "test-models"


FAKE_MPS_CONTROL = REPO_ROOT / "tests" / "support" / "fake_mps_control.py"


def fake_gpu_sections(metrics_interval_s: float = 0.5) -> dict[str, dict[str, Any]]:
    """Config sections for one fake GPU (`[gpu] fake_devices`: a fake NVML, a device
    computing on the CPU, a fake MPS daemon) with one standby worker."""
    return {
        "gpu": {
            "fake_devices": 1, "fake_memory_mib": 1024, "mps_control": str(FAKE_MPS_CONTROL),
            "standby_per_device": 1, "metrics_interval_s": metrics_interval_s,
        }
    }  # fmt: skip


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(str(value))


def render_config(sections: dict[str, dict[str, Any]], functions: list[dict[str, Any]]) -> str:
    lines: list[str] = []
    for section, values in sections.items():
        lines.append(f"[{section}]")
        lines.extend(f"{key} = {_toml_value(value)}" for key, value in values.items())
        lines.append("")
    for function in functions:
        lines.append("[[functions]]")
        lines.extend(f"{key} = {_toml_value(value)}" for key, value in function.items())
        lines.append("")
    return "\n".join(lines)


@dataclass
class GatewayProcess:
    url: str
    process: subprocess.Popen[str]
    state_dir: Path
    config_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def request(
        self,
        method: str,
        path: str,
        body: object = None,
        headers: dict[str, str] | None = None,
        raw: bytes | None = None,
        timeout_s: float = 60.0,
    ) -> tuple[int, dict[str, str], bytes]:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        request = urllib.request.Request(
            self.url + path, data=data, method=method, headers=headers or {}
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                return response.status, dict(response.headers), response.read()
        except urllib.error.HTTPError as error:
            return error.code, dict(error.headers), error.read()

    def json(self, method: str, path: str, body: object = None) -> Any:
        status, _, payload = self.request(method, path, body)
        assert status < 400, (status, payload)
        return json.loads(payload)

    def instances(self, function: str | None = None) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.json("GET", "/system/instances")
        return [i for i in items if function is None or i["function"] == function]

    def wait_ready(
        self, function: str, count: int = 1, timeout_s: float = 120.0
    ) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            ready = [i for i in self.instances(function) if i["state"] == "ready"]
            if len(ready) >= count:
                return ready
            assert self.process.poll() is None, "gateway exited while waiting"
            time.sleep(0.1)
        raise AssertionError(f"{function}: fewer than {count} ready instances in {timeout_s} s")

    def worker_pids(self) -> set[int]:
        return {i["pid"] for i in self.instances() if i["pid"]}


def _descendants(pid: int) -> list[psutil.Process]:
    with contextlib.suppress(psutil.NoSuchProcess):
        return psutil.Process(pid).children(recursive=True)
    return []


@contextlib.contextmanager
def start_gateway(
    tmp_path: Path,
    functions: list[dict[str, Any]] | None = None,
    sections: dict[str, dict[str, Any]] | None = None,
    wait_for_functions: bool = True,
    state_dir: Path | None = None,
) -> Iterator[GatewayProcess]:
    """Run `infless serve` with the given functions; yield once they are ready."""
    state_dir = state_dir or tmp_path / "state"
    merged: dict[str, dict[str, Any]] = {
        "gateway": {"host": "127.0.0.1", "port": 0},
        "state": {"dir": str(state_dir)},
        "models": {"repository": str(TEST_MODEL_REPOSITORY)},
        "batching": {"warmup_rounds": 1},
        # fixed instance counts unless a test asks for the autoscaler
        "scaling": {"policy": "none"},
    }
    for section, values in (sections or {}).items():
        merged.setdefault(section, {}).update(values)
    config_path = tmp_path / f"config-{time.monotonic_ns()}.toml"
    config_path.write_text(render_config(merged, functions or []), encoding="utf-8")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "infless.cli",
            "serve",
            "--config",
            str(config_path),
            "--log-level",
            "WARNING",
        ],
        stdout=subprocess.PIPE,
        stderr=None,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    gateway: GatewayProcess | None = None
    children: list[psutil.Process] = []
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        match = re.search(r"(http://[0-9.]+:[0-9]+)", line)
        assert match, f"gateway did not start: {line!r} (exit {process.poll()})"
        gateway = GatewayProcess(match.group(1), process, state_dir, config_path)
        _wait_healthy(gateway)
        if wait_for_functions:
            for function in functions or []:
                if function.get("instances", 1) > 0:
                    gateway.wait_ready(function["name"], int(function.get("instances", 1)))
        yield gateway
    finally:
        children = _descendants(process.pid)
        stop_gateway(process)
        gone_by = time.monotonic() + 10
        alive = [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
        while alive and time.monotonic() < gone_by:
            time.sleep(0.05)
            alive = [c for c in alive if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
        for child in alive:
            with contextlib.suppress(psutil.NoSuchProcess):
                child.kill()
        assert not alive, f"worker processes outlived the gateway: {[c.pid for c in alive]}"


def _wait_healthy(gateway: GatewayProcess, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            status, _, _ = gateway.request("GET", "/healthz", timeout_s=2.0)
            if status == 200:
                return
        time.sleep(0.05)
    raise AssertionError("gateway never became healthy")


def stop_gateway(process: subprocess.Popen[str], timeout_s: float = 60.0) -> int:
    """SIGTERM (graceful drain), then SIGKILL after `timeout_s`. Returns the exit code."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    if process.stdout is not None:
        process.stdout.close()
    return process.returncode


def build_test_models(names: list[str]) -> None:
    """Build (or find cached) zoo packages into the test model repository."""
    subprocess.run(
        [
            sys.executable, "-m", "infless.cli", "models", "build", *names,
            "--repository", str(TEST_MODEL_REPOSITORY),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )  # fmt: skip

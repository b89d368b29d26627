"""Auth over real HTTP: basic auth on management routes with a generated password, the
invoke token, open health routes, faas-cli's empty bearer, and the CLI's credentials."""

from __future__ import annotations

import base64
import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from tests.support.gateway import GatewayProcess, start_gateway

SAMPLE = {"inputs": np.zeros((1, 28, 28)).tolist()}
TOKEN = "invoke-token-1"


def _basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def _cli(
    gw: GatewayProcess, *args: str, env: dict[str, str], stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "infless.cli", *args, "--gateway", gw.url],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )


def _wait_ready(gw: GatewayProcess, headers: dict[str, str], timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status, _, body = gw.request("GET", "/system/instances", headers=headers)
        assert status == 200, body
        if any(i["state"] == "ready" for i in json.loads(body)):
            return
        time.sleep(0.1)
    raise AssertionError("mnist never became ready")


def test_basic_auth_token_and_cli_credentials(tmp_path: Path) -> None:
    sections = {"auth": {"basic_auth": True, "invoke_token": TOKEN}}
    functions = [{"name": "mnist", "image": "mnist", "slo_ms": 100, "max_batch": 4}]
    with start_gateway(tmp_path, functions, sections, wait_for_functions=False) as gw:
        password_file = gw.state_dir / "basic_auth_password"
        password = password_file.read_text().strip()
        assert stat.S_IMODE(password_file.stat().st_mode) == 0o600
        admin = _basic("admin", password)
        _wait_ready(gw, admin)

        for path in ("/system/functions", "/system/info", "/system/instances"):
            for headers in ({}, {"Authorization": "Bearer "}, _basic("admin", "guess")):
                status, reply_headers, body = gw.request("GET", path, headers=headers)
                assert status == 401, (path, headers)
                assert reply_headers["WWW-Authenticate"] == 'Basic realm="Restricted"'
                assert json.loads(body)["error"] == "invalid credentials"
                assert password.encode() not in body
        assert gw.request("POST", "/v2/repository/index", raw=b"")[0] == 401
        assert gw.request("POST", "/v2/repository/index", raw=b"", headers=admin)[0] == 200

        for path in ("/healthz", "/metrics", "/openapi.json", "/v2/health/ready", "/v2"):
            assert gw.request("GET", path)[0] == 200, path

        status, headers, _ = gw.request("POST", "/function/mnist", SAMPLE)
        assert status == 401
        assert headers["WWW-Authenticate"] == 'Bearer realm="Restricted"'
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        assert gw.request("POST", "/function/mnist", SAMPLE, headers=bearer)[0] == 200
        assert gw.request("POST", "/function/mnist", SAMPLE, headers=admin)[0] == 200
        assert gw.request("GET", "/v2/models/mnist")[0] == 401
        assert gw.request("GET", "/v2/models/mnist", headers=bearer)[0] == 200

        # The CLI: flags or OPENFAAS_* variables, else what `infless login` saved.
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENFAAS_", "INFLESS_"))}
        env["INFLESS_CONFIG_DIR"] = str(tmp_path / "cli")
        denied = _cli(gw, "list", env=env)
        assert denied.returncode == 1
        assert "401" in denied.stderr
        assert password not in denied.stderr
        listed = _cli(gw, "list", "--json", "--username", "admin", "--password", password, env=env)
        assert listed.returncode == 0, listed.stderr
        assert json.loads(listed.stdout)[0]["name"] == "mnist"
        with_env = _cli(gw, "ls", env={**env, "OPENFAAS_PASSWORD": password})
        assert with_env.returncode == 0, with_env.stderr

        wrong = _cli(gw, "login", "--password-stdin", env=env, stdin="nope\n")
        assert wrong.returncode == 1
        login = _cli(gw, "login", "-u", "admin", "--password-stdin", env=env, stdin=password)
        assert login.returncode == 0, login.stderr
        saved = tmp_path / "cli" / "credentials.json"
        assert stat.S_IMODE(saved.stat().st_mode) == 0o600
        assert _cli(gw, "describe", "mnist", env=env).returncode == 0

        sample = json.dumps(SAMPLE)
        assert _cli(gw, "invoke", "mnist", env=env, stdin=sample).returncode == 0  # admin
        invoked = _cli(gw, "invoke", "mnist", env={**env, "INFLESS_TOKEN": TOKEN}, stdin=sample)
        assert invoked.returncode == 0, invoked.stderr
        assert _cli(gw, "logout", env=env).returncode == 0
        assert _cli(gw, "list", env=env).returncode == 1


def test_auth_off_ignores_an_empty_bearer_and_the_password_survives_restarts(
    tmp_path: Path,
) -> None:
    with start_gateway(tmp_path) as gw:
        for header in ("Bearer ", "Bearer", "Basic garbage"):
            status, _, body = gw.request(
                "GET", "/system/functions", headers={"Authorization": header}
            )
            assert status == 200, (header, body)
    state = tmp_path / "auth-state"
    sections = {"auth": {"basic_auth": True, "user": "ops"}}
    passwords = []
    for _ in range(2):
        with start_gateway(tmp_path, sections=sections, state_dir=state) as gw:
            passwords.append((state / "basic_auth_password").read_text().strip())
            status, _, _ = gw.request("GET", "/system/info", headers=_basic("ops", passwords[-1]))
            assert status == 200
    assert passwords[0] == passwords[1]

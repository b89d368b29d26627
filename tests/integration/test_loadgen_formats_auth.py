"""The command line's request formats, routes, credentials and closed loop, end to end: against
the stand-in gateway (with an auth layer added here), and against a real `infless serve`.

Asserts exit codes, messages, counts and statuses, never wall-clock thresholds.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp import web

from loadgen import cli
from loadgen.records import read_records_csv
from tests.support.fake_gateway import BERT, MNIST, FakeGateway, serve_in_thread
from tests.support.gateway import GatewayProcess, start_gateway

TOKEN = "invoke-t0ken"
USER, PASSWORD = "admin", "pa55word"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class AuthGateway(FakeGateway):
    """The stand-in gateway behind infless's rules: basic auth on /system/*, the bearer token
    on /function/*."""

    def app(self) -> web.Application:
        basic = _basic_header()

        @web.middleware
        async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
            header = request.headers.get("Authorization", "")
            wanted = basic if request.path.startswith("/system/") else f"Bearer {TOKEN}"
            if request.path.startswith(("/system/", "/function/")) and header != wanted:
                return web.json_response(
                    {"error": "invalid credentials", "code": "unauthorized"}, status=401
                )
            return await handler(request)

        app = super().app()
        app.middlewares.append(check)
        return app


def _basic_header() -> str:
    return "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()


def _wait_ready(gw: GatewayProcess, headers: dict[str, str], timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status, _, body = gw.request("GET", "/system/instances", headers=headers)
        assert status == 200, body
        if any(i["state"] == "ready" for i in json.loads(body)):
            return
        time.sleep(0.1)
    raise AssertionError("mnist never became ready")


def _synthetic(url: str, out: Path, *extra: str) -> list[str]:
    return [
        "synthetic",
        "--gateway",
        url,
        "--out",
        str(out),
        "--no-progress",
        "--poll-interval-s",
        "0.1",
        *extra,
    ]


def test_closed_loop_command_end_to_end(tmp_path: Path) -> None:
    gateway = FakeGateway(functions=[MNIST, BERT], exec_ms=1.0)
    out = tmp_path / "closed"
    with serve_in_thread(gateway) as url:
        code = cli.main(
            _synthetic(
                url,
                out,
                "--shape",
                "closed",
                "--concurrency",
                "2",
                "--duration-s",
                "30",
                "--max-requests",
                "40",
            )
        )
    assert code == 0
    records = read_records_csv(out / "records.csv")
    assert len(records) == 40 == sum(gateway.received.values())
    assert gateway.received["mnist"] >= 2
    assert gateway.received["bert"] >= 2
    assert gateway.bad_bodies == []
    summary = json.loads((out / "summary.json").read_text())
    assert summary["run"]["closed_loop"] is True
    assert summary["run"]["send_lag"].startswith("not applicable: closed loop")
    assert summary["overall"]["send_lag_ms_p99"] is None
    assert summary["overall"]["requests"] == 40
    assert summary["run"]["connection_limit"] >= 4
    assert "send lag p99: not applicable: closed loop" in (out / "report.md").read_text()


def test_open_loop_reports_its_send_lag(tmp_path: Path) -> None:
    gateway = FakeGateway(functions=[MNIST], exec_ms=0.0)
    out = tmp_path / "open"
    with serve_in_thread(gateway) as url:
        code = cli.main(_synthetic(url, out, "--rate-rps", "50", "--duration-s", "0.2"))
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["run"]["closed_loop"] is False
    assert "send_lag" not in summary["run"]
    assert isinstance(summary["overall"]["send_lag_ms_p99"], float)
    report = (out / "report.md").read_text()
    assert "json bodies on /function/{name}" in report
    assert "ms (send time minus scheduled time)" in report


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--concurrency", "2"], "--concurrency 2 applies to --shape closed only"),
        (["--format", "raw", "--functions", "bert"], "--format raw carries one input's bytes"),
        (["--format", "msgpack", "--route", "v2"], "--format msgpack is not available"),
        (["--user", "admin"], "--user 'admin' needs a password"),
        (["--shape", "closed", "--concurrency", "0"], "--concurrency 0: need at least 1"),
    ],
)
def test_impossible_requests_are_refused_naming_the_flag(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    flags: list[str],
    message: str,
) -> None:
    monkeypatch.delenv("OPENFAAS_PASSWORD", raising=False)
    gateway = FakeGateway(functions=[MNIST, BERT], exec_ms=0.0)
    with serve_in_thread(gateway) as url:
        code = cli.main(_synthetic(url, tmp_path / "x", "--duration-s", "0.1", *flags))
    assert code == 2
    assert message in capsys.readouterr().err
    assert gateway.received == {}


def test_credentials_flags_and_401s(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENFAAS_PASSWORD", raising=False)
    password_file = tmp_path / "password"
    password_file.write_text(PASSWORD + "\n")
    gateway = AuthGateway(functions=[MNIST], exec_ms=0.0)
    short = ("--rate-rps", "40", "--duration-s", "0.25", "--shape", "constant")
    with serve_in_thread(gateway) as url:
        anonymous = cli.main(_synthetic(url, tmp_path / "a", *short))
        anonymous_err = capsys.readouterr().err
        no_token = cli.main(
            _synthetic(
                url, tmp_path / "b", *short, "--user", USER, "--password-file", str(password_file)
            )
        )
        no_token_err = capsys.readouterr().err
        monkeypatch.setenv("OPENFAAS_PASSWORD", PASSWORD)
        full = cli.main(_synthetic(url, tmp_path / "c", *short, "--user", USER, "--token", TOKEN))
    assert anonymous == 1
    assert "HTTP 401" in anonymous_err
    assert "pass --user NAME --password-file FILE" in anonymous_err
    assert no_token == 1
    assert "10 requests were refused with HTTP 401" in no_token_err
    assert "--token TOKEN" in no_token_err
    warnings = (tmp_path / "b" / "report.md").read_text()
    assert "refused with HTTP 401 (unauthorized): pass --token TOKEN" in warnings
    assert full == 0
    records = read_records_csv(tmp_path / "c" / "records.csv")
    assert [r.status for r in records] == [200] * 10
    assert json.loads((tmp_path / "c" / "summary.json").read_text())["instances"]["polls"] > 0


@pytest.mark.slow
def test_every_format_and_route_against_a_real_gateway(tmp_path: Path) -> None:
    """mnist (one input) behind basic auth and an invoke token, driven in every format on both
    routes: every request is a 200 (on /function with the gateway's timing headers)."""
    function = {"name": "mnist", "image": "mnist", "slo_ms": 500, "max_batch": 8, "instances": 1}
    auth = {"basic_auth": True, "user": USER, "password": PASSWORD, "invoke_token": TOKEN}
    password_file = tmp_path / "password"
    password_file.write_text(PASSWORD)
    pairs = [
        ("json", "function"),
        ("msgpack", "function"),
        ("raw", "function"),
        ("json", "v2"),
        ("raw", "v2"),
    ]
    sections = {"auth": auth}
    with start_gateway(tmp_path, [function], sections, wait_for_functions=False) as gw:
        _wait_ready(gw, {"Authorization": _basic_header()})
        codes = {
            pair: cli.main(
                _synthetic(
                    gw.url,
                    tmp_path / "-".join(pair),
                    "--shape",
                    "closed",
                    "--concurrency",
                    "2",
                    "--max-requests",
                    "24",
                    "--duration-s",
                    "20",
                    "--timeout-s",
                    "20",
                    "--format",
                    pair[0],
                    "--route",
                    pair[1],
                    "--token",
                    TOKEN,
                    "--user",
                    USER,
                    "--password-file",
                    str(password_file),
                )
            )
            for pair in pairs
        }
    assert codes == dict.fromkeys(pairs, 0)
    for pair in pairs:
        records = read_records_csv(tmp_path / "-".join(pair) / "records.csv")
        assert len(records) == 24
        assert {(r.status, r.error) for r in records} == {(200, "")}, pair
        if pair[1] == "function":  # the V2 route sends no X-Infless-* headers
            assert all(r.instance.startswith("mnist") and r.batch_size >= 1 for r in records)

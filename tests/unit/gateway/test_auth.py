"""Gateway auth: OpenFaaS-style basic auth, the invoke token, and the generated password."""

from __future__ import annotations

import base64
import stat
from pathlib import Path

import orjson
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from infless.config import Config, parse_config
from infless.gateway.auth import (
    AuthSettings,
    auth_middleware,
    basic_ok,
    bearer_ok,
    load_auth,
    resolve_password,
)
from infless.gateway.routes import auth_middlewares

SETTINGS = AuthSettings(b"admin", b"s3cret-pass", b"tok-123")


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def _config(tmp_path: Path, **auth: object) -> Config:
    return parse_config({"state": {"dir": str(tmp_path / "state")}, "auth": auth})


async def _call(settings: AuthSettings, path: str, authorization: str | None) -> web.StreamResponse:
    headers = {"Authorization": authorization} if authorization is not None else {}
    request = make_mocked_request("GET", path, headers=headers)

    async def handler(_: web.Request) -> web.StreamResponse:
        return web.Response(text="served")

    middleware = auth_middleware(settings)
    return await middleware(request, handler)


def test_basic_credentials_are_checked_exactly() -> None:
    assert basic_ok(_basic("admin", "s3cret-pass"), SETTINGS)
    assert not basic_ok(_basic("admin", "s3cret-pas"), SETTINGS)
    assert not basic_ok(_basic("root", "s3cret-pass"), SETTINGS)
    assert not basic_ok("Basic !!!not-base64", SETTINGS)
    assert not basic_ok("Bearer tok-123", SETTINGS)
    assert not basic_ok(None, SETTINGS)
    assert not basic_ok(_basic("admin", "s3cret-pass"), AuthSettings())
    assert bearer_ok("Bearer tok-123", SETTINGS)
    assert not bearer_ok("Bearer tok-12", SETTINGS)
    assert not bearer_ok("Bearer ", SETTINGS)


async def test_management_routes_need_basic_auth_and_401_leaks_nothing() -> None:
    board = ("/ui", "/ui/", "/ui/events", "/ui/static/board.js", "/ui/function/mnist")
    for path in ("/system/functions", "/system/info", "/v2/repository/index", *board):
        for header in (None, "Bearer ", _basic("admin", "wrong"), "Bearer tok-123"):
            response = await _call(SETTINGS, path, header)
            assert response.status == 401, (path, header)
            assert response.headers["WWW-Authenticate"] == 'Basic realm="Restricted"'
            assert isinstance(response, web.Response)
            assert response.body is not None
            body = bytes(response.body)  # type: ignore[arg-type]
            assert orjson.loads(body)["error"] == "invalid credentials"
            assert b"s3cret" not in body
            assert b"admin" not in body
        ok = await _call(SETTINGS, path, _basic("admin", "s3cret-pass"))
        assert ok.status == 200


async def test_invoke_routes_take_the_token_or_the_admin() -> None:
    for path in ("/function/mnist", "/v2/models/mnist/infer"):
        denied = await _call(SETTINGS, path, None)
        assert denied.status == 401
        assert denied.headers["WWW-Authenticate"] == 'Bearer realm="Restricted"'
        assert (await _call(SETTINGS, path, "Bearer wrong")).status == 401
        assert (await _call(SETTINGS, path, "Bearer tok-123")).status == 200
        assert (await _call(SETTINGS, path, _basic("admin", "s3cret-pass"))).status == 200
    basic_only = AuthSettings(b"admin", b"pw")
    assert (await _call(basic_only, "/function/mnist", None)).status == 200  # open by default


async def test_open_routes_stay_open() -> None:
    for path in ("/healthz", "/metrics", "/openapi.json", "/v2/health/ready", "/v2"):
        assert (await _call(SETTINGS, path, None)).status == 200


def test_auth_off_installs_nothing(tmp_path: Path) -> None:
    config = _config(tmp_path)
    assert not load_auth(config).enabled
    assert auth_middlewares(config) == []
    assert len(auth_middlewares(_config(tmp_path, invoke_token="t"))) == 1


def test_a_missing_password_is_generated_once_stored_0600_and_announced(tmp_path: Path) -> None:
    config = _config(tmp_path, basic_auth=True)
    said: list[str] = []
    password = resolve_password(config, said.append)
    path = tmp_path / "state" / "basic_auth_password"
    assert path.read_text().strip() == password
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(password) >= 24
    assert len(said) == 1
    assert password in said[0]
    assert str(path) in said[0]
    assert resolve_password(config, said.append) == password
    assert len(said) == 1  # announced only on the first start
    settings = load_auth(config, said.append)
    assert settings.user == b"admin"
    assert settings.password == password.encode()


def test_a_configured_password_or_file_wins(tmp_path: Path) -> None:
    said: list[str] = []
    config = _config(tmp_path, basic_auth=True, password="given")
    assert resolve_password(config, said.append) == "given"
    secret = tmp_path / "secret"
    secret.write_text("from-file\n")
    config = _config(tmp_path, basic_auth=True, password_file=str(secret))
    assert resolve_password(config, said.append) == "from-file"
    assert said == []

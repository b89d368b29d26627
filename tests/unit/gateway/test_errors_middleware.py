"""Every error of the aiohttp application is JSON `{"error", "code"}` (`errors_as_json`):
aiohttp's own 404, 405 and 413, a body whose `Content-Encoding` lies (400, not 500, and the
next request is served), an InflessError, and a bug (500, logged) — aiohttp's test server,
no workers."""

from __future__ import annotations

import gzip
from collections.abc import AsyncIterator

import pytest
from aiohttp import ClientResponse, web
from aiohttp.test_utils import TestClient, TestServer

from infless.errors import FunctionNotFound
from infless.gateway.errors import errors_as_json
from infless.gateway.http1 import UPSTREAM_SETTINGS

Client = TestClient[web.Request, web.Application]


async def _echo(request: web.Request) -> web.Response:
    return web.Response(body=await request.read())


async def _missing(request: web.Request) -> web.Response:
    raise FunctionNotFound("function 'x' is not deployed")


async def _bug(request: web.Request) -> web.Response:
    raise RuntimeError("a bug")


@pytest.fixture
async def client() -> AsyncIterator[Client]:
    app = web.Application(middlewares=[errors_as_json], client_max_size=1024)
    app.add_routes([web.post("/echo", _echo), web.get("/missing", _missing), web.get("/bug", _bug)])
    server = TestServer(app)
    await server.start_server(**UPSTREAM_SETTINGS)  # as the gateway serves it
    async with TestClient(server) as test_client:
        yield test_client


async def _error(response: ClientResponse, status: int, code: str) -> dict[str, str]:
    assert response.status == status
    assert response.content_type == "application/json"
    body: dict[str, str] = await response.json()
    assert body["code"] == code
    return body


async def test_an_unknown_route_is_a_json_404_naming_it(client: Client) -> None:
    body = await _error(await client.get("/nope"), 404, "not_found")
    assert "GET /nope" in body["error"]


async def test_a_wrong_method_is_a_json_405_naming_the_allowed_ones(client: Client) -> None:
    response = await client.delete("/echo")
    body = await _error(response, 405, "method_not_allowed")
    assert "POST" in response.headers["Allow"]
    assert "POST" in body["error"]


async def test_a_body_over_the_limit_is_a_json_413(client: Client) -> None:
    await _error(await client.post("/echo", data=b"x" * 4096), 413, "payload_too_large")


async def test_a_body_that_is_not_gzip_is_a_json_400_not_500(
    client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    headers = {"Content-Encoding": "gzip", "Connection": "close"}  # one per connection
    response = await client.post("/echo", data=b"not gzip at all", headers=headers)
    body = await _error(response, 400, "bad_content_encoding")
    assert "gzip" in body["error"]
    good = await client.post("/echo", data=gzip.compress(b"fine"), headers=headers)
    assert await good.read() == b"fine"
    assert not [r for r in caplog.records if r.levelname == "ERROR"]  # not a server error


async def test_an_infless_error_keeps_its_status_and_code(client: Client) -> None:
    await _error(await client.get("/missing"), 404, "function_not_found")


async def test_a_bug_is_a_json_500_and_logged(
    client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    body = await _error(await client.get("/bug"), 500, "internal")
    assert "GET /bug" in body["error"]
    assert "a bug" not in body["error"]  # the log has it, not the client
    assert any("GET /bug failed" in r.getMessage() for r in caplog.records)

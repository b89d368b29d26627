"""The gateway's listening protocol (`gateway.fastpath`) driven by hand: bytes in through
`data_received`, bytes out through a fake transport, a fake invoker behind it. Answers in
request order, Expect: 100-continue, 413, 401 without the invoke token, 400 on garbage,
504 from the sweep, a client gone lets its sample go, refusals decided at the headers, and
what is forwarded to the aiohttp application."""

from __future__ import annotations

import asyncio

import pytest

from infless.gateway.auth import AuthSettings
from infless.gateway.fastpath import Connection
from infless.gateway.http1 import LowerHeaders, Request, forwarded_head
from tests.support.fastpath import connect, post, responses


async def test_an_invoke_is_answered_as_the_invoker_answers() -> None:
    connection, transport, invoker, _, _ = connect()
    connection.data_received(post("now", b'{"inputs": [1]}'))
    (response,) = responses(transport)
    assert response.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"Content-Type: application/json\r\n" in response
    assert b"Content-Length: 19\r\n" in response
    assert b"X-Call-Id: 1\r\n" in response
    assert response.endswith(b'\r\n\r\nnow:{"inputs": [1]}')
    assert not transport.closed  # keep-alive
    assert invoker.bodies == [b'{"inputs": [1]}']


async def test_pipelined_requests_are_answered_in_their_order() -> None:
    connection, transport, invoker, _, _ = connect()
    connection.data_received(post("later", b"a") + post("now", b"b") + post("later", b"c"))
    assert transport.written == b""  # the first waits for its sample; the rest wait for it
    invoker.futures[0].set_result(None)
    await asyncio.sleep(0)
    first, second = responses(transport)
    assert first.endswith(b"done:1")
    assert second.endswith(b"now:b")
    invoker.futures[1].set_result(None)
    await asyncio.sleep(0)
    assert responses(transport)[-1].endswith(b"done:2")
    assert invoker.bodies == [b"a", b"b", b"c"]


async def test_expect_100_continue_is_answered_before_the_body() -> None:
    connection, transport, _, _, _ = connect()
    request = post("now", b"xyz", "Expect: 100-continue")
    head, body = request.split(b"\r\n\r\n", 1)
    connection.data_received(head + b"\r\n\r\n")
    assert transport.written == b"HTTP/1.1 100 Continue\r\n\r\n"
    connection.data_received(body)
    assert responses(transport)[-1].endswith(b"now:xyz")


async def test_a_body_over_the_limit_gets_413_and_the_connection_closes() -> None:
    connection, transport, invoker, _, _ = connect(max_body_bytes=4)
    connection.data_received(post("now", b"0123456789"))
    (response,) = responses(transport)
    assert response.startswith(b"HTTP/1.1 413 ")
    assert b"max_body_bytes = 4" in response
    assert b"Connection: close\r\n" in response
    assert transport.closed
    assert invoker.bodies == []


async def test_without_the_invoke_token_an_invoke_gets_401() -> None:
    connection, transport, invoker, _, _ = connect(AuthSettings(invoke_token=b"s3cret"))
    connection.data_received(post("now", b"x"))
    connection.data_received(post("now", b"y", "Authorization: Bearer s3cret"))
    denied, served = responses(transport)
    assert denied.startswith(b"HTTP/1.1 401 ")
    assert b'WWW-Authenticate: Bearer realm="Restricted"' in denied
    assert served.endswith(b"now:y")
    assert invoker.bodies == [b"y"]


async def test_a_malformed_request_gets_400_and_the_connection_closes() -> None:
    connection, transport, _, _, _ = connect()
    connection.data_received(b"NOT HTTP AT ALL\r\n\r\n")
    (response,) = responses(transport)
    assert response.startswith(b"HTTP/1.1 400 ")
    assert b'"code":"bad_request"' in response
    assert transport.closed


async def test_an_invoke_waiting_past_the_gateway_timeout_gets_504() -> None:
    connection, transport, invoker, server, clock = connect()
    server.start()
    connection.data_received(post("later", b"a"))
    await clock.advance(9.0)
    assert transport.written == b""
    await clock.advance(2.0)  # past the 10-s timeout: the next sweep answers it
    (response,) = responses(transport)
    assert response.startswith(b"HTTP/1.1 504 ")
    assert invoker.expired == 1
    invoker.futures[0].set_result(None)  # the sample finishing later answers nobody
    await asyncio.sleep(0)
    assert len(responses(transport)) == 1
    server.close_idle()


async def test_a_client_that_leaves_lets_its_sample_go() -> None:
    connection, _, invoker, server, _ = connect()
    connection.data_received(post("later", b"a"))
    connection.connection_lost(None)
    assert invoker.abandoned == 1
    assert connection not in server.connections


async def test_a_refusal_is_decided_at_the_headers_and_its_body_never_read() -> None:
    connection, transport, invoker, _, _ = connect()
    invoker.frontend.refusing.add("busy")
    connection.data_received(post("busy", b"a large body, never decoded"))
    connection.data_received(post("busy", b"another"))
    first, second = responses(transport)
    assert first == second  # canned: encoded once
    assert first.startswith(b"HTTP/1.1 429 ")
    assert b"Retry-After: 2\r\n" in first
    assert invoker.bodies == []


def test_what_is_forwarded_carries_its_own_length_and_closes() -> None:
    request = Request(
        b"GET",
        b"/system/info?x=1",
        LowerHeaders(),
        [(b"Host", b"h"), (b"Connection", b"keep-alive"), (b"Transfer-Encoding", b"chunked"),
         (b"Authorization", b"Basic abc")],
        bytearray(b"body"),
    )  # fmt: skip
    head = forwarded_head(request, upgrade=False)
    assert head.startswith(b"GET /system/info?x=1 HTTP/1.1\r\n")
    assert b"Authorization: Basic abc\r\n" in head
    assert b"keep-alive" not in head
    assert b"chunked" not in head
    assert head.endswith(b"Content-Length: 4\r\nConnection: close\r\n\r\n")
    upgrade = forwarded_head(
        Request(b"GET", b"/ws", LowerHeaders(), [(b"Connection", b"Upgrade")]), upgrade=True
    )
    assert b"Connection: Upgrade\r\n" in upgrade
    assert b"Content-Length" not in upgrade


@pytest.mark.parametrize(
    ("url", "name"),
    [
        (b"/function/mnist", "mnist"),
        (b"/function/mnist?x=1", "mnist"),
        (b"/function/mnist/sub", None),  # a sub-path: aiohttp's route
        (b"/function/", None),
        (b"/function/m%20x", None),  # escaped: aiohttp decodes it
        (b"/system/info", None),
    ],
)
def test_which_requests_the_fast_path_answers(url: bytes, name: str | None) -> None:
    request = Request(b"POST", url, LowerHeaders(), [])
    assert Connection._invoke_name(request) == name
    assert Connection._invoke_name(Request(b"GET", url, LowerHeaders(), [])) is None

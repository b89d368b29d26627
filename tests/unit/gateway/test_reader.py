"""What the listening socket cannot take is answered as JSON in its turn, then the
connection closes (`gateway.reader`): a target, a header, too many headers or a whole head
over the limits, a body whose length says it is too large (never read); an invoke's
`Content-Encoding` is undone before the invoker sees its body, or refused; what is
forwarded to aiohttp always names a Host."""

from __future__ import annotations

import asyncio
import gzip
import json

import pytest

from infless.gateway import http1
from infless.gateway.http1 import LowerHeaders, Request, forwarded_head
from tests.support.fastpath import FakeTransport, connect, post, responses


def _error(response: bytes) -> tuple[int, dict[str, str]]:
    head, body = response.split(b"\r\n\r\n", 1)
    assert b"Content-Type: application/json\r\n" in head
    return int(head.split(b" ")[1]), json.loads(body)


def _closed_after_one_error(transport: FakeTransport) -> tuple[int, dict[str, str]]:
    (response,) = responses(transport)
    assert b"Connection: close\r\n" in response
    assert transport.closed
    return _error(response)


async def test_a_target_over_the_limit_is_414() -> None:
    connection, transport, _, _, _ = connect()
    target = b"/system/info?" + b"a" * http1.MAX_TARGET_BYTES
    connection.data_received(b"GET " + target + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    status, error = _closed_after_one_error(transport)
    assert (status, error["code"]) == (414, "uri_too_long")
    assert str(http1.MAX_TARGET_BYTES) in error["error"]


async def test_a_header_over_the_limit_is_431_naming_it() -> None:
    connection, transport, _, _, _ = connect()
    big = b"X-Big: " + b"a" * http1.MAX_FIELD_BYTES + b"\r\n"
    connection.data_received(b"GET /system/info HTTP/1.1\r\nHost: x\r\n" + big + b"\r\n")
    status, error = _closed_after_one_error(transport)
    assert (status, error["code"]) == (431, "header_too_large")
    assert "'X-Big'" in error["error"]


async def test_too_many_headers_are_431() -> None:
    connection, transport, _, _, _ = connect()
    headers = b"".join(b"X-H%d: v\r\n" % i for i in range(http1.MAX_HEADERS + 1))
    connection.data_received(b"GET /system/info HTTP/1.1\r\n" + headers + b"\r\n")
    status, error = _closed_after_one_error(transport)
    assert (status, error["code"]) == (431, "too_many_headers")


async def test_a_head_that_never_ends_is_cut_off_at_its_limit() -> None:
    connection, transport, _, _, _ = connect()
    connection.data_received(b"GET /system/info HTTP/1.1\r\nX-Slow: ")
    sent = 0
    while not transport.closed:  # a header trickling in, each piece under every other limit
        connection.data_received(b"a" * 1024)
        sent += 1024
        assert sent <= 2 * http1.MAX_HEAD_BYTES
    status, error = _closed_after_one_error(transport)
    assert (status, error["code"]) == (431, "header_too_large")


async def test_a_body_whose_length_is_over_the_limit_is_413_before_it_is_sent() -> None:
    connection, transport, invoker, _, _ = connect(max_body_bytes=1000)
    connection.data_received(
        b"POST /system/functions HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n"
    )  # the head only: the client waits for an answer before sending more
    status, error = _closed_after_one_error(transport)
    assert (status, error["code"]) == (413, "payload_too_large")
    assert invoker.bodies == []


async def test_an_error_is_answered_in_its_turn_after_the_requests_before_it() -> None:
    connection, transport, invoker, _, _ = connect()
    connection.data_received(post("later", b"a") + b"GARBAGE\r\n\r\n" + post("now", b"b"))
    assert transport.written == b""  # the first waits for its sample; the error waits for it
    invoker.futures[0].set_result(None)
    await asyncio.sleep(0)
    first, second = responses(transport)
    assert first.endswith(b"done:1")
    assert _error(second)[0] == 400
    assert transport.closed
    assert invoker.bodies == [b"a"]  # nothing after the error was read


async def test_an_invoke_body_is_decoded_before_the_invoker_sees_it() -> None:
    connection, transport, invoker, _, _ = connect()
    connection.data_received(
        post("now", gzip.compress(b'{"inputs": [1]}'), "Content-Encoding: gzip")
    )
    assert invoker.bodies == [b'{"inputs": [1]}']
    assert responses(transport)[-1].endswith(b'now:{"inputs": [1]}')


@pytest.mark.parametrize(
    ("encoding", "status", "code"),
    [("gzip", 400, "bad_content_encoding"), ("br", 415, "unsupported_media_type")],
)
async def test_an_invoke_body_that_cannot_be_decoded_is_refused_and_serving_goes_on(
    encoding: str, status: int, code: str
) -> None:
    connection, transport, invoker, _, _ = connect()
    connection.data_received(post("now", b"not compressed", f"Content-Encoding: {encoding}"))
    connection.data_received(post("now", b"fine"))
    refused, served = responses(transport)
    assert _error(refused)[0] == status
    assert _error(refused)[1]["code"] == code
    assert served.endswith(b"now:fine")  # the connection keeps serving
    assert invoker.bodies == [b"fine"]


def test_a_forwarded_request_without_a_host_gets_one() -> None:
    request = Request(b"GET", b"/system/info", LowerHeaders(), [], version="1.1")
    assert b"\r\nHost: localhost\r\n" in forwarded_head(request, upgrade=False)
    named = Request(b"GET", b"/system/info", LowerHeaders(), [(b"host", b"gw:8080")])
    head = forwarded_head(named, upgrade=False)
    assert head.count(b"ost: ") == 1
    assert b"host: gw:8080\r\n" in head

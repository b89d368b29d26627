"""The sending engine against a tiny HTTP server on 127.0.0.1: reply framings, closed
connections, timeouts, the connection limit, the loopback rule.

Asserts what each request reported and what the server saw, never how long things took.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from loadgen.connection import request_bytes
from loadgen.engine import ConnectionPool
from loadgen.functions import TargetError
from tests.unit.loadgen.http_stub import Stub, serve


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes
    error: str


async def call(pool: ConnectionPool, path: str, headers: tuple[tuple[str, str], ...] = ()) -> Reply:
    future: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
    wire = pool.request_bytes(path, "application/json", b'{"inputs": [1]}', headers)
    pool.submit(
        wire,
        lambda status, hdrs, body, error, done_t: future.set_result(
            Reply(status, hdrs, body, error)
        ),
    )
    return await future


async def _pool(url: str, limit: int = 4, timeout_s: float = 5.0) -> ConnectionPool:
    pool = ConnectionPool(url, limit, timeout_s)
    await pool.start()
    return pool


async def test_content_length_replies_reuse_one_connection() -> None:
    stub = Stub()
    async with serve(stub) as url:
        pool = await _pool(url)
        replies = [await call(pool, "/function/cl") for _ in range(5)]
        await pool.close()
    assert [(r.status, r.error) for r in replies] == [(200, "")] * 5
    assert stub.connections == 1
    first = replies[0].headers
    assert first["X-Call-Id"] == "c-1"
    assert first["X-Infless-Batch-Size"] == "3"
    assert first["X-Infless-Queue-Ms"] == "1.5"
    assert first["X-Duration-Seconds"] == "0.002"
    assert first["Content-Type"] == "application/json"
    assert replies[0].body == b""  # a 200's body is not kept
    path, headers, body = stub.requests[0]
    assert path == "/function/cl"
    assert headers["content-type"] == "application/json"
    assert headers["host"] == url.removeprefix("http://")
    assert body == b'{"inputs": [1]}'


async def test_chunked_replies_and_error_bodies() -> None:
    stub = Stub()
    async with serve(stub) as url:
        pool = await _pool(url)
        ok = await call(pool, "/function/chunked")
        failed = await call(pool, "/function/chunked-error")
        again = await call(pool, "/function/cl")
        await pool.close()
    assert (ok.status, ok.headers["X-Infless-Exec-Ms"]) == (200, "0.25")
    assert failed.status == 503
    assert failed.body == b'{"error": "x", "code": "no_capacity"}'
    assert again.status == 200
    assert stub.connections == 1  # chunked framing left the connection reusable


async def test_a_body_delimited_by_close_ends_there() -> None:
    stub = Stub()
    async with serve(stub) as url:
        pool = await _pool(url)
        reply = await call(pool, "/function/eof")
        after = await call(pool, "/function/cl")
        await pool.close()
    assert (reply.status, reply.error, reply.headers["X-Call-Id"]) == (200, "", "c-1")
    assert after.status == 200
    assert stub.connections == 2


async def test_connection_close_and_a_cut_reply_reconnect() -> None:
    stub = Stub()
    async with serve(stub) as url:
        pool = await _pool(url)
        closing = await call(pool, "/function/close")
        cut = await call(pool, "/function/cut")
        after = await call(pool, "/function/cl")
        await pool.close()
    assert (closing.status, closing.error) == (200, "")
    assert (cut.status, cut.error) == (0, "ServerDisconnectedError")
    assert (after.status, after.error) == (200, "")
    assert stub.connections == 3
    assert len(stub.requests) == 3  # the cut request was not sent twice


async def test_a_reused_connection_closed_unanswered_is_retried_once() -> None:
    stub = Stub()
    async with serve(stub) as url:
        pool = await _pool(url)
        first = await call(pool, "/function/drop-next")
        second = await call(pool, "/function/cl")  # dropped on connection 1, retried on 2
        await pool.close()
    assert [(r.status, r.error) for r in (first, second)] == [(200, "")] * 2
    assert stub.connections == 2
    assert [p for p, _, _ in stub.requests] == ["/function/drop-next", *["/function/cl"] * 2]


async def test_a_reply_that_is_not_http_fails_the_request() -> None:
    stub = Stub()
    async with serve(stub) as url:
        pool = await _pool(url)
        reply = await call(pool, "/function/garbage")
        after = await call(pool, "/function/cl")
        await pool.close()
    assert (reply.status, reply.error) == (0, "ClientPayloadError")
    assert after.status == 200


async def test_timeouts_close_the_connection_and_the_next_request_goes_on() -> None:
    stub = Stub(slow_s=5.0)
    async with serve(stub) as url:
        pool = await _pool(url, timeout_s=0.2)
        slow, fast = await asyncio.gather(call(pool, "/function/slow"), call(pool, "/function/cl"))
        after = await call(pool, "/function/cl")
        await pool.close()
    assert (slow.status, slow.error, slow.headers) == (0, "timeout", {})
    assert (fast.status, after.status) == (200, 200)
    assert pool.in_flight == 0


async def test_requests_beyond_the_limit_wait_for_a_connection() -> None:
    stub = Stub()
    async with serve(stub) as url:
        pool = await _pool(url, limit=2)
        replies = await asyncio.gather(*(call(pool, "/function/count") for _ in range(7)))
        await pool.close()
    assert [r.status for r in replies] == [200] * 7
    assert stub.connections == 2
    assert stub.max_in_flight == 2


async def test_refused_connections_and_closing_report_every_request() -> None:
    async with serve(Stub()) as url:
        pass  # nothing listens on this port any more
    pool = await _pool(url)
    refused = await asyncio.gather(*(call(pool, "/function/cl") for _ in range(3)))
    assert {(r.status, r.error) for r in refused} == {(0, "ClientConnectorError")}
    stub = Stub(slow_s=5.0)
    async with serve(stub) as live_url:
        live = await _pool(live_url)
        pending = asyncio.ensure_future(call(live, "/function/slow"))
        await stub.arrived.wait()
        await live.close()
        cancelled = await pending
    assert (cancelled.status, cancelled.error) == (0, "cancelled")
    await pool.close()


async def test_extra_headers_are_sent() -> None:
    stub = Stub()
    async with serve(stub) as url:
        pool = await _pool(url)
        await call(pool, "/function/cl", (("Authorization", "Bearer t0k"),))
        await pool.close()
    assert stub.requests[0][1]["authorization"] == "Bearer t0k"


def test_only_loopback_unless_allowed() -> None:
    with pytest.raises(TargetError, match="--allow-remote"):
        ConnectionPool("http://192.0.2.1:8080", 4, 1.0)
    assert ConnectionPool("http://192.0.2.1:8080", 4, 1.0, allow_remote=True).port == 8080


def test_request_bytes_are_one_whole_request() -> None:
    wire = request_bytes("h:1", "/p", "application/msgpack", b"\x81\xa1a\x01", [("X-A", "b")])
    head, _, body = wire.partition(b"\r\n\r\n")
    assert head.split(b"\r\n") == [
        b"POST /p HTTP/1.1",
        b"Host: h:1",
        b"User-Agent: infless-loadgen/0.1",
        b"Content-Type: application/msgpack",
        b"Content-Length: 4",
        b"X-A: b",
    ]
    assert body == b"\x81\xa1a\x01"
    with pytest.raises(ValueError, match="line breaks"):
        request_bytes("h", "/p", "a/b", b"", [("X-A", "b\r\nX-Evil: 1")])


def test_the_engine_runs_on_uvloop() -> None:
    """The command line runs the client on uvloop: the same exchanges, the same reports."""
    import uvloop

    async def scenario() -> tuple[list[tuple[int, str]], int]:
        stub = Stub(slow_s=5.0)
        async with serve(stub) as url:
            pool = await _pool(url, timeout_s=0.3)
            replies = [
                await call(pool, f"/function/{path}")
                for path in ("cl", "chunked", "cl", "cut", "drop-next", "cl", "slow", "close")
            ]
            await pool.close()
        return [(r.status, r.error) for r in replies], stub.connections

    replies, connections = uvloop.run(scenario())
    assert replies == [
        (200, ""),
        (200, ""),
        (200, ""),
        (0, "ServerDisconnectedError"),
        (200, ""),
        (200, ""),  # retried on a fresh connection
        (0, "timeout"),
        (200, ""),
    ]
    # the first (to the cut), after the cut, the retry, after the timeout (to the close)
    assert connections == 4

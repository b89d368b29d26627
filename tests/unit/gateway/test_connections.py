"""The listening socket's bounds and drain on a fake clock: the connection table's orders
(`gateway.connections`) and what a connection gets from them — 408 for a request still
arriving after `read_timeout_s`, a close after `idle_timeout_s` with nothing begun, a new
connection taking an idle one's place at `max_connections` (503 `busy` when every one is
owed an answer), 431 for an endless head — and the drain: what is in flight is answered,
what comes after gets 503 `draining`, every connection closes."""

from __future__ import annotations

import asyncio

from infless.gateway.connections import ConnectionLimits, ConnectionTable
from infless.gateway.http1 import MAX_HEAD_BYTES
from tests.support.fastpath import another, connect, post, responses

LIMITS = ConnectionLimits(read_timeout_s=5.0, idle_timeout_s=30.0, max_connections=3)


def test_at_the_limit_the_longest_idle_connection_makes_room() -> None:
    table: ConnectionTable[str] = ConnectionTable(LIMITS)
    for name, at_s in (("a", 0.0), ("b", 1.0), ("c", 2.0)):
        assert table.admit(name, at_s).replaces is None
    table.reading("a", 3.0)  # a request begun: no longer idle
    admission = table.admit("d", 4.0)
    assert admission.replaces == "b"
    assert table.open == {"a", "c", "d"}


def test_with_none_idle_the_longest_reading_makes_room_else_the_new_one_is_refused() -> None:
    table: ConnectionTable[str] = ConnectionTable(LIMITS)
    for name in "abc":
        table.admit(name, 0.0)
    table.reading("b", 1.0)
    table.reading("a", 2.0)
    table.owed("c")
    assert table.admit("d", 3.0).replaces == "b"
    table.owed("a")
    table.owed("d")
    refused = table.admit("e", 4.0)
    assert refused.refused
    assert "e" not in table.open


def test_slow_requests_and_idle_connections_expire_and_owed_ones_never() -> None:
    table: ConnectionTable[str] = ConnectionTable(LIMITS)
    for name in "abc":
        table.admit(name, 0.0)
    table.reading("a", 1.0)
    table.owed("c")
    assert (table.expired(5.9).slow, table.expired(5.9).idle) == ([], [])
    assert table.expired(6.0).slow == ["a"]
    expired = table.expired(1000.0)
    assert (expired.slow, expired.idle) == ([], ["b"])  # c is owed an answer: never cut


async def test_a_slow_loris_request_gets_408_once_its_time_is_up() -> None:
    connection, transport, _, server, clock = connect(limits=LIMITS)
    server.start()
    connection.data_received(b"POST /function/now HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    for _ in range(9):  # a byte every half second: never a whole header
        await clock.advance(0.5)
        connection.data_received(b"a")
    assert transport.written == b""
    await clock.advance(1.0)
    (answer,) = responses(transport)
    assert answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n")
    assert b'"code":"request_timeout"' in answer
    assert b"Connection: close" in answer
    assert transport.closed


async def test_a_request_trickled_after_an_answered_one_is_timed_from_its_first_byte() -> None:
    connection, transport, _, server, clock = connect(limits=LIMITS)
    server.start()
    connection.data_received(post("now", b"1") + b"POST /function/now HTTP/1.1\r\n")
    await clock.advance(4.0)
    assert len(responses(transport)) == 1
    assert not transport.closed
    await clock.advance(1.5)
    assert responses(transport)[-1].startswith(b"HTTP/1.1 408 ")


async def test_an_idle_connection_closes_and_one_owed_an_answer_does_not() -> None:
    _, idle_transport, invoker, server, clock = connect(limits=LIMITS)
    waiting, waiting_transport = another(server)
    server.start()
    waiting.data_received(post("later", b"x"))
    await clock.advance(1.0)
    await clock.advance(30.0)
    assert idle_transport.closed
    assert idle_transport.written == b""
    assert not waiting_transport.closed, "owed an answer: only the request timeout applies"
    (answer,) = responses(waiting_transport)
    assert answer.startswith(b"HTTP/1.1 504 "), "the request timeout's answer (10 s), not a cut"
    assert invoker.expired == 1


async def test_a_new_connection_at_the_limit_closes_the_longest_idle() -> None:
    _, first_transport, _, server, clock = connect(limits=LIMITS)
    for _ in range(2):
        await clock.advance(1.0)
        another(server)
    await clock.advance(1.0)
    _, newest = another(server)
    assert first_transport.closed
    assert not newest.closed
    assert len(server.connections) == LIMITS.max_connections


async def test_a_new_connection_is_refused_when_every_one_is_owed_an_answer() -> None:
    first, _, _, server, _ = connect(limits=LIMITS)
    first.data_received(post("later", b"1"))
    for _ in range(2):
        connection, _ = another(server)
        connection.data_received(post("later", b"2"))
    _, refused = another(server)
    (answer,) = responses(refused)
    assert answer.startswith(b"HTTP/1.1 503 ")
    assert b'"code":"busy"' in answer
    assert refused.closed


async def test_an_endless_head_gets_431() -> None:
    connection, transport, invoker, _, _ = connect()
    connection.data_received(b"POST /function/now HTTP/1.1\r\nHost: x\r\n")
    for _ in range(MAX_HEAD_BYTES // 1000 + 5):
        connection.data_received(b"X-Pad: " + b"a" * 1000 + b"\r\n")
    (answer,) = responses(transport)
    assert answer.startswith(b"HTTP/1.1 431 ")
    assert b'"code":"header_too_large"' in answer
    assert transport.closed
    assert invoker.bodies == []


async def test_draining_answers_what_is_in_flight_and_refuses_the_rest() -> None:
    busy, busy_transport, invoker, server, _ = connect()
    _, idle_transport = another(server)
    busy.data_received(post("later", b"accepted"))
    server.drain()
    assert idle_transport.closed, "nothing owed: closed at once"
    assert not busy_transport.closed
    late, late_transport = another(server)
    late.data_received(post("now", b"late"))
    (refused,) = responses(late_transport)
    assert refused.startswith(b"HTTP/1.1 503 ")
    assert b'"code":"draining"' in refused
    assert b"Retry-After: 1\r\n" in refused
    assert late_transport.closed
    invoker.futures[0].set_result(None)
    await asyncio.sleep(0)
    (answered,) = responses(busy_transport)
    assert answered.startswith(b"HTTP/1.1 200 ")
    assert b"Connection: close\r\n" in answered
    assert busy_transport.is_closing()
    assert invoker.bodies == [b"accepted"], "nothing begun after the drain reached the invoker"


async def test_a_request_pipelined_behind_one_in_flight_is_refused_once_draining() -> None:
    connection, transport, invoker, server, _ = connect()
    connection.data_received(post("later", b"first") + post("now", b"second"))
    server.drain()
    invoker.futures[0].set_result(None)
    await asyncio.sleep(0)
    answers = responses(transport)
    assert answers[0].endswith(b"done:1")
    assert invoker.bodies == [b"first"]
    assert transport.closed

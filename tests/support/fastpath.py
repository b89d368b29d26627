"""A fast-path connection (`gateway.fastpath.Connection`) driven by hand: a fake transport
that collects what is written, a fake invoker behind it, and the bytes of requests."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from infless.errors import Overloaded
from infless.gateway.auth import AuthSettings
from infless.gateway.fastpath import Connection, FastPath, FastPathConfig
from infless.gateway.invoke import JSON, Answer, Started
from tests.support.clock import FakeClock


class FakeTransport:
    def __init__(self) -> None:
        self.written = bytearray()
        self.closed = False
        self.reading = True

    def write(self, data: bytes) -> None:
        self.written += data

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True


class FakeFrontend:
    timeout_s = 10.0

    def __init__(self) -> None:
        self.refusing: set[str] = set()

    def refuse_early(self, name: str) -> Overloaded | None:
        if name in self.refusing:
            return Overloaded(f"function {name!r} is at capacity", retry_after_s=2.0)
        return None


class FakeInvoker:
    """Answers `name` with its body echoed; futures it hands out are settled by the test."""

    def __init__(self) -> None:
        self.frontend = FakeFrontend()
        self.futures: list[asyncio.Future[Any]] = []
        self.bodies: list[bytes] = []
        self.expired = 0
        self.abandoned = 0

    def start(self, name: str, headers: Any, body: bytes) -> Answer | Started:
        self.bodies.append(body)
        if name == "now":
            return Answer(200, b"now:" + body, JSON, {"X-Call-Id": "1"})
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.futures.append(future)
        pending = cast(Any, type("P", (), {"future": future})())
        return Started(cast(Any, None), pending, JSON, str(len(self.futures)), 0)

    def finish(self, started: Started) -> Answer:
        return Answer(200, b"done:" + started.call_id.encode(), JSON, {})

    def expire(self, started: Started) -> Answer:
        self.expired += 1
        return Answer(504, b'{"code":"gateway_timeout"}', JSON, {})

    def abandon(self, started: Started) -> None:
        self.abandoned += 1


def connect(
    auth: AuthSettings | None = None, max_body_bytes: int = 1 << 20
) -> tuple[Connection, FakeTransport, FakeInvoker, FastPath, FakeClock]:
    invoker, clock = FakeInvoker(), FakeClock()
    server = FastPath(
        cast(Any, invoker),
        FastPathConfig("/nonexistent.sock", max_body_bytes, auth or AuthSettings()),
        clock,
    )
    connection = server()
    transport = FakeTransport()
    connection.connection_made(cast(Any, transport))
    return connection, transport, invoker, server, clock


def post(name: str, body: bytes, *headers: str) -> bytes:
    extra = "".join(f"{h}\r\n" for h in headers)
    return (
        f"POST /function/{name} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n{extra}\r\n"
    ).encode() + body


def responses(transport: FakeTransport) -> list[bytes]:
    return [b"HTTP/1.1 " + r for r in bytes(transport.written).split(b"HTTP/1.1 ")[1:]]

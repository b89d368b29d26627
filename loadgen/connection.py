"""One HTTP/1.1 keep-alive connection of the engine: request bytes out, a parsed reply in.

I/O shell: an `asyncio.Protocol` carrying one request at a time (no pipelining). A request is
one pre-built bytes object (request line, headers, body: `request_bytes`) written with one
`transport.write`; the reply is parsed by `httptools.HttpResponseParser` (Content-Length,
chunked, or delimited by the connection's close) keeping only the headers records use and,
for a non-200 reply, the body (for its error code). It reports to its pool (`PoolSide`),
which decides what to send next and what a lost connection means.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Protocol, cast

import httptools

USER_AGENT = "infless-loadgen/0.1"
TIMEOUT = "timeout"
CANCELLED = "cancelled"
CONNECT_FAILED = "ClientConnectorError"
DISCONNECTED = "ServerDisconnectedError"
CONNECTION_ERROR = "ClientOSError"
BAD_RESPONSE = "ClientPayloadError"
MAX_ERROR_BODY = 65536  # bytes of a non-200 body kept (for its error code)
# The reply headers a record keeps, by lower-case name -> the name records use.
RECORDED: dict[bytes, str] = {
    name.lower().encode(): name
    for name in (
        "Content-Type",
        "X-Call-Id",
        "X-Duration-Seconds",
        "X-Infless-Instance",
        "X-Infless-Batch-Size",
        "X-Infless-Queue-Ms",
        "X-Infless-Exec-Ms",
        "X-Infless-Cold-Start",
        "X-Infless-Cold-Start-Ms",
        "X-Infless-Dtype",
        "X-Infless-Shape",
        "Retry-After",
    )
}
_FRAMING = (b"content-length", b"transfer-encoding")

# (status, recorded headers, body if not 200, error, perf_counter time of the last byte)
DoneCallback = Callable[[int, dict[str, str], bytes, str, float], None]


def request_bytes(
    host_header: str,
    target: str,
    content_type: str,
    body: bytes,
    headers: Iterable[tuple[str, str]] = (),
) -> bytes:
    """A whole `POST` request as one bytes object (built once, sent many times)."""
    lines = [
        f"POST {target} HTTP/1.1",
        f"Host: {host_header}",
        f"User-Agent: {USER_AGENT}",
        f"Content-Type: {content_type}",
        f"Content-Length: {len(body)}",
        *(f"{name}: {value}" for name, value in headers),
    ]
    for line in lines:
        if "\r" in line or "\n" in line:
            raise ValueError(f"header line {line!r}: line breaks are not allowed")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class PoolSide(Protocol):
    """What a connection tells its pool."""

    def finish(
        self, exchange: Exchange, status: int, headers: dict[str, str], body: bytes, error: str
    ) -> None: ...

    def release(self, connection: Connection) -> None: ...

    def lost(self, connection: Connection, exchange: Exchange | None, error: str) -> None: ...


class Exchange:
    """One submitted request until it reports."""

    __slots__ = ("conn", "deadline", "finished", "on_done", "retried", "wire")

    def __init__(self, wire: bytes, on_done: DoneCallback, deadline: float) -> None:
        self.wire = wire
        self.on_done = on_done
        self.deadline = deadline
        self.finished = False
        self.retried = False
        self.conn: Connection | None = None


class Connection(asyncio.Protocol):
    """One keep-alive connection; its pool hands it one exchange at a time."""

    def __init__(self, pool: PoolSide) -> None:
        self._pool = pool
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self.exchange: Exchange | None = None
        self.served = 0
        self.closed = False
        self.got_bytes = False
        self._complete = False
        self._keep_alive = False
        self._headers_done = False
        self._framed = False
        self._status = 0
        self._headers: dict[str, str] = {}
        self._body: list[bytes] | None = None

    # -- transport callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if self.exchange is None:  # unsolicited bytes: this connection cannot be trusted
            self.abort()
            return
        self.got_bytes = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError:
            exchange = self.exchange
            self.exchange = None
            self.abort()
            self._pool.finish(exchange, 0, {}, b"", BAD_RESPONSE)
            return
        if self._complete:
            self._message_done()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        exchange = self.exchange
        self.exchange = None
        if exchange is not None and exc is None and self._headers_done and not self._framed:
            self.served += 1  # a close-delimited body ends here, cleanly
            self._pool.finish(exchange, self._status, self._headers, self._joined_body(), "")
            exchange = None
        self._pool.lost(self, exchange, CONNECTION_ERROR if exc is not None else DISCONNECTED)

    # -- httptools callbacks
    def on_message_begin(self) -> None:
        self._status = 0
        self._headers = {}
        self._body = None
        self._framed = False
        self._headers_done = False

    def on_header(self, name: bytes, value: bytes) -> None:
        lowered = name.lower()
        key = RECORDED.get(lowered)
        if key is not None:
            self._headers[key] = value.decode("latin-1")
        elif lowered in _FRAMING:
            self._framed = True

    def on_headers_complete(self) -> None:
        self._status = self._parser.get_status_code()
        self._headers_done = True
        if self._status != 200:
            self._body = []

    def on_body(self, body: bytes) -> None:
        if self._body is not None and sum(map(len, self._body)) < MAX_ERROR_BODY:
            self._body.append(body)

    def on_message_complete(self) -> None:
        self._complete = True
        # asked here: once the message is done, the parser's flags are reset
        self._keep_alive = self._parser.should_keep_alive()

    # -- pool side
    def send(self, exchange: Exchange) -> None:
        assert self._transport is not None
        self.exchange = exchange
        exchange.conn = self
        self.got_bytes = False
        self._complete = False
        self._headers_done = False
        self._transport.write(exchange.wire)

    def abort(self) -> None:
        self.exchange = None
        if self._transport is not None and not self.closed:
            self._transport.abort()

    def _joined_body(self) -> bytes:
        return b"".join(self._body) if self._body else b""

    def _message_done(self) -> None:
        exchange = self.exchange
        self.exchange = None
        self._complete = False
        self.served += 1
        if exchange is None:
            return
        exchange.conn = None
        if self._keep_alive:
            self._pool.release(self)
        elif self._transport is not None:
            self._transport.close()
        self._pool.finish(exchange, self._status, self._headers, self._joined_body(), "")

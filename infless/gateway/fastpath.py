"""The gateway's listening socket: invokes answered on a lean HTTP/1.1 path, everything else
passed to the aiohttp application.

aiohttp costs tens of microseconds of CPU per request before a handler runs (its protocol,
request and response objects, routing, middlewares) — as much again as infless's own work
on an invoke. So the listening socket speaks HTTP/1.1 itself, with `httptools` (the C parser
aiohttp's client and uvicorn use; reading and its limits are `gateway.reader`'s):
`POST /function/{name}` is parsed, authenticated (the invoke token, when set), its
`Content-Encoding` undone (`gateway.encoding`), answered by `gateway.invoke.Invoker` and
written as one buffer. Any other request — management routes, metrics, the Open Inference
Protocol, other methods, a `/function/{name}/...` sub-path — is forwarded to the aiohttp
application on an internal unix socket with `Connection: close`, and its response piped back
as it comes (streamed responses and protocol upgrades included), so those routes behave
exactly as aiohttp serves them. Keep-alive and pipelining are honoured (answers in request
order), `Expect: 100-continue` is answered; a request that cannot be read (malformed, over a
limit, a body too large) is answered as JSON in its turn, then the connection closes.
Gateway side: never imports torch.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import cast

from infless.clock import Clock
from infless.dataplane.request import Outcome
from infless.errors import InflessError, Unauthorized
from infless.gateway.auth import REALM, AuthSettings, basic_ok, bearer_ok
from infless.gateway.encoding import decode_body
from infless.gateway.http1 import Request, encode_answer, forwarded_head, json_error
from infless.gateway.invoke import Answer, Invoker, Started, error_answer
from infless.gateway.reader import RequestReader

log = logging.getLogger(__name__)

INVOKE_PREFIX = b"/function/"
MAX_PIPELINED = 64  # requests parsed ahead of their answers before reading pauses
SWEEP_S = 0.5  # how often invokes are checked against the gateway's request timeout
MAX_CANNED = 4096  # canned refusals kept (per function, Retry-After and keep-alive)


@dataclass(frozen=True, slots=True)
class FastPathConfig:
    upstream: str  # the aiohttp application's unix socket
    max_body_bytes: int
    auth: AuthSettings = field(default_factory=AuthSettings)


class FastPath:
    """The protocol factory for the listening socket, its open connections, and the sweep
    that answers 504 to an invoke waiting longer than `gateway.request_timeout_s` (one
    timer for all of them, not one per request)."""

    def __init__(self, invoker: Invoker, config: FastPathConfig, clock: Clock) -> None:
        self.invoker = invoker
        self.config = config
        self.clock = clock
        self.connections: set[Connection] = set()
        self._sweeper: asyncio.Task[None] | None = None
        self._refusals: dict[tuple[str, str, bool], bytes] = {}

    def __call__(self) -> Connection:
        return Connection(self)

    def start(self) -> None:
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep(), name="fastpath")

    async def _sweep(self) -> None:
        timeout_s = self.invoker.frontend.timeout_s
        while True:
            await self.clock.sleep_until(self.clock.now() + SWEEP_S)
            late = self.clock.now() - timeout_s
            for connection in list(self.connections):
                connection.expire_before(late)

    def refusal(self, name: str, keep_alive: bool) -> bytes | None:
        """The canned 429 for a call to `name` refused before its body is read, or None.
        Answers differ only in Retry-After, whole seconds: they are encoded once each."""
        refused = self.invoker.frontend.refuse_early(name)
        if refused is None:
            return None
        answer = error_answer(refused)
        key = (name, answer.headers.get("Retry-After", ""), keep_alive)
        canned = self._refusals.get(key)
        if canned is None:
            if len(self._refusals) > MAX_CANNED:
                self._refusals.clear()
            canned = self._refusals[key] = encode_answer(answer, keep_alive)
        return canned

    def close_idle(self) -> None:
        """Close every connection with nothing in flight (the gateway is stopping)."""
        if self._sweeper is not None:
            self._sweeper.cancel()
        for connection in list(self.connections):
            connection.close_when_idle()


class Connection(RequestReader):
    """One client connection: answer the requests read (`RequestReader`) in order —
    invokes here, the rest forwarded."""

    def __init__(self, server: FastPath) -> None:
        super().__init__(server.config.max_body_bytes)
        self._server = server
        self._transport: asyncio.Transport | None = None
        self._worker: asyncio.Task[None] | None = None  # a forwarded request, or an upgrade
        self._started: Started | None = None  # the invoke being answered
        self._started_s = 0.0
        self._keep_alive = True
        self._paused = False
        self._closing = False
        self._upgraded: asyncio.StreamWriter | None = None
        self._held: bytearray | None = None  # bytes after an upgrade, before the splice
        self._writable = asyncio.Event()  # cleared while the client's buffer is full
        self._writable.set()

    # -- asyncio.Protocol ---------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self._server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._server.connections.discard(self)
        self._closing = True
        self._writable.set()
        if self._worker is not None:
            self._worker.cancel()
        started, self._started = self._started, None
        if started is not None:  # its client left: the sample is let go
            self._server.invoker.abandon(started)
        if self._upgraded is not None:
            self._upgraded.close()

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    def data_received(self, data: bytes) -> None:
        if self._upgraded is not None:  # a spliced upgrade: bytes go through as they are
            self._upgraded.write(data)
            return
        if self._held is not None:  # an upgrade is being forwarded: hold them until spliced
            self._held += data
            return
        self.feed(data)

    # -- what the reader hands over -------------------------------------------------------
    def _head_read(self, request: Request) -> None:
        """An invoke may be refused at its headers (its body is then never read); an
        `Expect: 100-continue` is answered unless it is."""
        name = self._invoke_name(request)
        if name is not None and self._authorized(request.headers):
            request.refused = self._server.refusal(name, request.keep_alive_guess())
        if request.refused is None and (request.headers.get("expect") or "").lower() == (
            "100-continue"
        ):
            assert self._transport is not None
            self._transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def _queued(self) -> None:
        if len(self._queue) >= MAX_PIPELINED and self._transport is not None:
            self._transport.pause_reading()
            self._paused = True
        self._next()

    # -- answering -----------------------------------------------------------------------
    def _busy(self) -> bool:
        return self._started is not None or (self._worker is not None and not self._worker.done())

    def _next(self) -> None:
        """Answer the parsed requests in order (HTTP/1.1: one after the other): errors and
        refusals at once, invokes when their sample is done, the rest forwarded."""
        while self._queue and not self._closing and not self._busy():
            request = self._queue.popleft()
            if self._paused and self._transport is not None:
                self._transport.resume_reading()
                self._paused = False
            if request.error is not None:  # it could not be read: the connection ends here
                self._write(request.error, False)
                return
            name = self._invoke_name(request)
            if name is None:
                self._worker = asyncio.get_running_loop().create_task(self._forward_next(request))
                return
            if request.refused is not None:  # decided at its headers: canned bytes
                if not self._write_raw(request.refused, request.keep_alive):
                    return
                continue
            body = self._body(request)
            if isinstance(body, bytes):
                started = self._server.invoker.start(name, request.headers, body)
                if isinstance(started, Started):
                    self._started, self._keep_alive = started, request.keep_alive
                    self._started_s = self._server.clock.now()
                    started.pending.future.add_done_callback(self._done)
                    return
                body = started
            if not self._write(body, request.keep_alive):
                return

    def _body(self, request: Request) -> bytes | Answer:
        """An invoke's body, decoded (`Content-Encoding`), or why it is refused first: a
        missing invoke token (401), a body that is not what its encoding says (400, 413,
        415)."""
        if not self._authorized(request.headers):
            answer = error_answer(Unauthorized("invalid credentials"))
            answer.headers["WWW-Authenticate"] = f"Bearer {REALM}"
            return answer
        body = bytes(request.body)
        encoding = request.headers.get("content-encoding")
        if encoding is None:
            return body
        try:
            return decode_body(encoding, body, self._max_body_bytes)
        except InflessError as error:
            return error_answer(error)

    def _done(self, future: asyncio.Future[Outcome]) -> None:
        """The invoke's sample is done: its answer goes out, then the next request."""
        started, self._started = self._started, None
        if started is None or future is not started.pending.future:
            return  # expired or abandoned: answered already, or nobody to answer
        if self._write(self._server.invoker.finish(started), self._keep_alive):
            self._next()

    def expire_before(self, started_before_s: float) -> None:
        """Answer 504 to an invoke waiting since before `started_before_s`."""
        started = self._started
        if started is None or self._started_s >= started_before_s:
            return
        self._started = None
        if self._write(self._server.invoker.expire(started), self._keep_alive):
            self._next()

    def _write(self, answer: Answer, keep_alive: bool) -> bool:
        """Write one answer; whether the connection stays open."""
        return self._write_raw(encode_answer(answer, keep_alive), keep_alive)

    def _write_raw(self, response: bytes, keep_alive: bool) -> bool:
        transport = self._transport
        if transport is None or transport.is_closing():
            return False
        transport.write(response)
        if not keep_alive:
            self._close()
        return keep_alive

    async def _forward_next(self, request: Request) -> None:
        keep = await self._forward(request)
        if not keep:
            self._close()
            return
        self._worker = None
        self._next()

    @staticmethod
    def _invoke_name(request: Request) -> str | None:
        """The function a `POST /function/{name}` names (None: not one: forwarded)."""
        if request.method != b"POST" or not request.url.startswith(INVOKE_PREFIX):
            return None
        path = request.url[len(INVOKE_PREFIX) :].split(b"?", 1)[0]
        if not path or b"/" in path or b"%" in path:
            return None
        return path.decode("latin-1")

    def _authorized(self, headers: Mapping[str, str]) -> bool:
        auth = self._server.config.auth
        if auth.invoke_token is None:
            return True
        header = headers.get("authorization")
        return bearer_ok(header, auth) or basic_ok(header, auth)

    # -- forwarding to aiohttp ---------------------------------------------------------------
    async def _forward(self, request: Request, *, upgrade: bool = False) -> bool:
        """Pass the request to the aiohttp application and pipe its response back."""
        transport = self._transport
        assert transport is not None
        try:
            reader, writer = await asyncio.open_unix_connection(self._server.config.upstream)
        except OSError as exc:
            log.error("the gateway's application socket is gone: %s", exc)
            transport.write(
                encode_answer(json_error(503, "the gateway is stopping", "unavailable"), False)
            )
            return False
        writer.write(forwarded_head(request, upgrade) + bytes(request.body))
        if upgrade:
            return await self._splice(reader, writer)
        try:
            while chunk := await reader.read(1 << 16):
                if transport.is_closing():
                    break
                transport.write(chunk)
                await self._drain()
        finally:
            writer.close()
        return request.keep_alive and not transport.is_closing()

    async def _drain(self) -> None:
        """Wait while the client's socket buffer is full (a large streamed response)."""
        if not self._closing:
            await self._writable.wait()

    def _upgrade(self, rest: bytes) -> None:
        """A protocol upgrade (WebSocket): forward it, then splice the two sockets."""
        request = self._current
        if request is None:
            self._broken(json_error(400, "malformed upgrade request", "bad_request"))
            return
        request.method = self._parser.get_method()
        request.url = bytes(self._url)
        request.version = self._parser.get_http_version()
        self._current = None
        self._held = bytearray(rest)
        self._worker = asyncio.get_running_loop().create_task(self._forward_upgrade(request))

    async def _forward_upgrade(self, request: Request) -> None:
        await self._forward(request, upgrade=True)
        self._close()

    async def _splice(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        transport = self._transport
        assert transport is not None
        held, self._held = self._held or bytearray(), None
        self._upgraded = writer
        if held:
            writer.write(bytes(held))
        try:
            while chunk := await reader.read(1 << 16):
                transport.write(chunk)
                await self._drain()
        finally:
            writer.close()
        return False

    # -- closing -------------------------------------------------------------------------
    def _close(self) -> None:
        self._closing = True
        if self._transport is not None:
            self._transport.close()

    def close_when_idle(self) -> None:
        if not self._queue and not self._busy():
            self._close()

"""One connection of the gateway's listening socket: invokes answered on a lean HTTP/1.1
path, everything else passed to the aiohttp application.

aiohttp costs tens of microseconds of CPU per request before a handler runs (its protocol,
request and response objects, routing, middlewares) — as much again as infless's own work
on an invoke. So the listening socket speaks HTTP/1.1 itself, with `httptools` (the C parser
aiohttp's client and uvicorn use; reading and its limits are `gateway.reader`'s):
`POST /function/{name}` is parsed, authenticated (the invoke token, when set), its
`Content-Encoding` undone (`gateway.encoding`), answered by `gateway.invoke.Invoker` and
written as one buffer. Any other request — management routes, metrics, the Open Inference
Protocol, other methods, a `/function/{name}/...` sub-path — is forwarded to the aiohttp
application on an internal unix socket with `Connection: close`, and its response piped
back as it comes (streamed responses and protocol upgrades included), so those routes
behave exactly as aiohttp serves them. Keep-alive and pipelining are honoured (answers in
request order), `Expect: 100-continue` is answered; a request that cannot be read
(malformed, over a limit, a body too large) is answered as JSON in its turn, then the
connection closes. A connection reports its phase (reading, owed an answer, idle) to the
listener's table (`gateway.connections`), which bounds them: a request
arriving too slowly gets 408, an idle connection is closed, at the limit a new one takes
an idle one's place. Once the gateway drains (SIGTERM), what is in flight is answered and
every request not yet begun gets 503 `draining`. The listening socket as a whole (the
factory, the sweep, the drain) is `gateway.listener`'s. Gateway side: never imports torch.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, cast

from infless.dataplane.request import Outcome
from infless.errors import InflessError, Unauthorized
from infless.gateway.auth import REALM, invoke_allowed
from infless.gateway.encoding import decode_body
from infless.gateway.forwarding import Forwarding
from infless.gateway.http1 import (
    DRAINING,
    TOO_MANY_CONNECTIONS,
    Request,
    encode_answer,
    json_error,
)
from infless.gateway.invoke import Answer, Started, error_answer
from infless.gateway.reader import RequestReader

if TYPE_CHECKING:
    from infless.gateway.listener import FastPath

log = logging.getLogger(__name__)

INVOKE_PREFIX = b"/function/"
MAX_PIPELINED = 64  # requests parsed ahead of their answers before reading pauses


class Connection(Forwarding, RequestReader):
    """One client connection: answer the requests read (`RequestReader`) in order —
    invokes here, the rest forwarded."""

    def __init__(self, server: FastPath) -> None:
        super().__init__(server.config.max_body_bytes)
        self._server = server
        self._transport: asyncio.Transport | None = None
        self._begun_s = 0.0  # when the request being read began
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
        admission = self._server.table.admit(self, self._server.clock.now())
        if admission.replaces is not None:
            admission.replaces.close_when_idle()
        if admission.refused:
            self._fail(TOO_MANY_CONNECTIONS)

    def connection_lost(self, exc: Exception | None) -> None:
        self._server.table.closed(self)
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
    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._begun_s = self._server.clock.now()
        if not self._queue and not self._busy():  # else: when its predecessors are answered
            self._server.table.reading(self, self._begun_s)

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
        self._server.table.owed(self)
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
            last = self._last_answer(request)
            if last is not None:  # the connection ends with it
                self._write(last, False)
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
        if not self._queue and not self._busy():  # owed nothing: idle, or reading the next
            if self._current is None:
                self._server.table.idle(self, self._server.clock.now())
            else:
                self._server.table.reading(self, self._begun_s)

    def _last_answer(self, request: Request) -> Answer | None:
        """What ends the connection instead of serving `request`: 503 `draining` when the
        gateway drains (the request had not begun), or why it could not be read."""
        return DRAINING if self._server.draining else request.error

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
        """Write one answer; whether the connection stays open (not once draining)."""
        keep_alive = keep_alive and not self._server.draining
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
        if not keep or self._server.draining:
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
        return auth.invoke_token is None or invoke_allowed(headers.get("authorization"), auth)

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
        self._server.table.owed(self)  # spliced from now on: never cut as slow or idle
        self._held = bytearray(rest)
        self._worker = asyncio.get_running_loop().create_task(self._forward_upgrade(request))

    async def _forward_upgrade(self, request: Request) -> None:
        await self._forward(request, upgrade=True)
        self._close()

    # -- closing -------------------------------------------------------------------------
    def _fail(self, answer: Answer) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(encode_answer(answer, False))
        self._close()

    def _close(self) -> None:
        self._closing = True
        if self._transport is not None:
            self._transport.close()

    def too_slow(self) -> None:
        """Its request did not arrive within gateway.read_timeout_s: 408, then close."""
        limit_s = self._server.table.limits.read_timeout_s
        message = f"the request did not arrive within gateway.read_timeout_s = {limit_s:g} s"
        self._fail(json_error(408, message, "request_timeout"))

    def close_when_idle(self) -> None:
        if not self._queue and not self._busy():
            self._close()

"""Reading HTTP/1.1 requests off one client connection, with `httptools`, under limits.

`RequestReader` is the parsing half of the listening socket's protocol
(`gateway.fastpath.Connection` is the answering half): it turns the bytes received into
`http1.Request`s, queued in the order they came, and refuses — as a JSON answer queued in
its turn, after which nothing more is parsed — what it cannot take: malformed framing
(400), a request target or headers over `http1`'s limits (414, 431), a body over
`gateway.max_body_bytes` (413, as soon as its `Content-Length` says so: that body is never
read). It decides nothing about what a request asks for. Gateway side: never imports torch.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque

import httptools

from infless.errors import PayloadTooLarge
from infless.gateway import http1
from infless.gateway.http1 import LowerHeaders, Request, json_error
from infless.gateway.invoke import Answer, error_answer

log = logging.getLogger(__name__)


class Refused(Exception):
    """Raised from a parser callback: the request cannot be taken; `answer` says why."""

    def __init__(self, answer: Answer) -> None:
        super().__init__(answer.status)
        self.answer = answer


class RequestReader(asyncio.Protocol):
    """The parser's callbacks and the queue of requests read; subclasses answer them
    (`_queued`), look at a head as soon as it is read (`_head_read`) and take upgrades."""

    def __init__(self, max_body_bytes: int) -> None:
        self._max_body_bytes = max_body_bytes
        self._parser = httptools.HttpRequestParser(self)
        self._current: Request | None = None
        self._url = bytearray()
        self._queue: deque[Request] = deque()
        self._stopped = False  # a request could not be read: what follows is not parsed
        self._in_head = False  # between a request's first byte and its headers' end ...
        self._head_bytes = 0  # ... the bytes received (bounded: `http1.MAX_HEAD_BYTES`)
        self._header_count = 0

    # -- hooks -----------------------------------------------------------------------------
    def _queued(self) -> None:
        """A request (or a refusal) joined the queue."""
        raise NotImplementedError

    def _head_read(self, request: Request) -> None:
        """A request's head is read (its body may follow)."""

    def _upgrade(self, rest: bytes) -> None:
        """A protocol upgrade: `rest` are the bytes that followed its head."""
        raise NotImplementedError

    # -- reading ---------------------------------------------------------------------------
    def feed(self, data: bytes) -> None:
        if self._stopped:
            return
        if self._in_head:
            self._head_bytes += len(data)
            if self._head_bytes > http1.MAX_HEAD_BYTES:
                self._broken(http1.head_too_large())
                return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade as upgrade:
            self._upgrade(data[upgrade.args[0] :] if upgrade.args else b"")
        except httptools.HttpParserCallbackError as exc:
            refused = exc.__context__
            if not isinstance(refused, Refused):
                log.error("reading a request failed", exc_info=refused)
                refused = Refused(json_error(500, "the gateway failed to read it", "internal"))
            self._broken(refused.answer)
        except httptools.HttpParserError as exc:
            self._broken(json_error(400, f"malformed HTTP request: {exc}", "bad_request"))

    def _broken(self, answer: Answer) -> None:
        """The request being read cannot be taken: `answer` answers it in its turn (after
        the requests before it), then the connection closes; nothing more is parsed."""
        self._stopped = True
        self._current = None
        self._in_head = False
        self._queue.append(Request(b"", b"", LowerHeaders(), [], keep_alive=False, error=answer))
        self._queued()

    def _too_large(self) -> Answer:
        limit = self._max_body_bytes
        return error_answer(PayloadTooLarge(f"body exceeds gateway.max_body_bytes = {limit}"))

    # -- httptools callbacks ---------------------------------------------------------------
    def on_message_begin(self) -> None:
        self._url = bytearray()
        self._current = Request(b"", b"", LowerHeaders(), [])
        self._in_head, self._head_bytes, self._header_count = True, 0, 0

    def on_url(self, url: bytes) -> None:
        self._url += url
        if len(self._url) > http1.MAX_TARGET_BYTES:
            raise Refused(http1.target_too_long(len(self._url)))

    def on_header(self, name: bytes, value: bytes) -> None:
        request = self._current
        assert request is not None
        self._header_count += 1
        if self._header_count > http1.MAX_HEADERS:
            raise Refused(http1.too_many_headers())
        if len(name) + len(value) > http1.MAX_FIELD_BYTES:
            raise Refused(http1.header_too_large(name, len(name) + len(value)))
        request.raw_headers.append((name, value))
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        request.headers[key] = f"{request.headers[key]}, {text}" if key in request.headers else text

    def on_headers_complete(self) -> None:
        request = self._current
        assert request is not None
        self._in_head = False
        request.method = self._parser.get_method()
        request.url = bytes(self._url)
        request.version = self._parser.get_http_version()
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self._max_body_bytes:
            raise Refused(self._too_large())  # answered now: its body is never read
        self._head_read(request)

    def on_body(self, body: bytes) -> None:
        request = self._current
        assert request is not None
        if request.refused is not None:
            return
        request.body += body
        if len(request.body) > self._max_body_bytes:  # chunked: no length said so before
            raise Refused(self._too_large())

    def on_message_complete(self) -> None:
        request = self._current
        assert request is not None
        request.keep_alive = self._parser.should_keep_alive()
        self._current = None
        self._queue.append(request)
        self._queued()

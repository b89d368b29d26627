"""HTTP/1.1 on the wire, as the gateway's listening socket speaks it (`gateway.fastpath`):
a parsed request, headers read case-insensitively, the limits on a request's head, an
answer as response bytes, and the head of a request forwarded to the aiohttp application.
Pure: no I/O.

The listening socket enforces the limits (414, 431, as JSON) before aiohttp sees a request;
aiohttp is given wider ones (`UPSTREAM_SETTINGS`), so that its own plain-text refusals never
reach a client.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from http import HTTPStatus
from typing import TypedDict

import orjson

from infless.gateway.invoke import JSON, Answer

_REASONS = {status.value: status.phrase.encode() for status in HTTPStatus}

MAX_TARGET_BYTES = 8190  # the request target (aiohttp's own default line limit)
MAX_FIELD_BYTES = 8190  # one header, name and value
MAX_HEADERS = 100  # header lines in one request
MAX_HEAD_BYTES = 64 * 1024  # the whole head, request line and headers


class UpstreamSettings(TypedDict):
    """What aiohttp is told: limits wider than the above, with room for the headers
    forwarding adds; no lingering over a body its route did not read (a forwarded body is
    whole, and one aiohttp cannot decode would be read again only to log an error)."""

    max_line_size: int
    max_field_size: int
    max_headers: int
    lingering_time: float


UPSTREAM_SETTINGS = UpstreamSettings(
    max_line_size=2 * MAX_TARGET_BYTES,
    max_field_size=2 * MAX_FIELD_BYTES,
    max_headers=MAX_HEADERS + 16,
    lingering_time=0.0,
)


class LowerHeaders(dict[str, str]):
    """Request headers by lower-case name, read case-insensitively (as aiohttp's are)."""

    def get(self, key: str, default: str | None = None) -> str | None:  # type: ignore[override]
        return super().get(key.lower(), default)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and super().__contains__(key.lower())


@dataclass(slots=True)
class Request:
    method: bytes
    url: bytes
    headers: LowerHeaders
    raw_headers: list[tuple[bytes, bytes]]
    body: bytearray = field(default_factory=bytearray)
    keep_alive: bool = True
    version: str = "1.1"
    refused: bytes | None = None  # a 429 decided before its body was read
    error: Answer | None = None  # it could not be read: this answers it, then the end

    def keep_alive_guess(self) -> bool:
        """Keep-alive as the headers say (the parser's own answer comes with the body)."""
        connection = (self.headers.get("connection") or "").lower()
        if self.version == "1.0":
            return connection == "keep-alive"
        return connection != "close"


def encode_answer(answer: Answer, keep_alive: bool) -> bytes:
    """An answer as the bytes of an HTTP/1.1 response."""
    reason = _REASONS.get(answer.status, b"Unknown")
    head = [
        b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n"
        % (answer.status, reason, answer.content_type.encode(), len(answer.body))
    ]
    for name, value in answer.headers.items():
        head.append(f"{name}: {value}\r\n".encode("latin-1"))
    if not keep_alive:
        head.append(b"Connection: close\r\n")
    head.append(b"\r\n")
    return b"".join(head) + answer.body


def json_error(status: int, message: str, code: str) -> Answer:
    return Answer(status, orjson.dumps({"error": message, "code": code}), JSON, {})


DRAINING = json_error(
    503,
    "the gateway is shutting down and accepts no new requests; retry on another gateway, "
    "or on this one once it has restarted",
    "draining",
)
DRAINING.headers["Retry-After"] = "1"
TOO_MANY_CONNECTIONS = json_error(
    503, "every connection of the gateway is owed an answer (gateway.max_connections)", "busy"
)
TOO_MANY_CONNECTIONS.headers["Retry-After"] = "1"


def target_too_long(length: int) -> Answer:
    return json_error(
        414,
        f"the request target is {length} bytes or more, over the limit of {MAX_TARGET_BYTES}; "
        "send long inputs in the body",
        "uri_too_long",
    )


def header_too_large(name: bytes, length: int) -> Answer:
    field = name[:64].decode("latin-1")
    return json_error(
        431,
        f"header {field!r} is {length} bytes, over the limit of {MAX_FIELD_BYTES}; "
        "send large values in the body",
        "header_too_large",
    )


def too_many_headers() -> Answer:
    return json_error(431, f"more than {MAX_HEADERS} header lines; send fewer", "too_many_headers")


def head_too_large() -> Answer:
    return json_error(
        431,
        f"the request's head exceeds {MAX_HEAD_BYTES} bytes; send large values in the body",
        "header_too_large",
    )


_HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"transfer-encoding", b"content-length"})


def forwarded_head(request: Request, upgrade: bool) -> bytes:
    """The request line and headers sent on to aiohttp: its own body length, and one
    request per connection (an upgrade keeps its Connection header)."""
    lines = [b"%s %s HTTP/%s\r\n" % (request.method, request.url, request.version.encode())]
    if not any(name.lower() == b"host" for name, _ in request.raw_headers):
        # aiohttp refuses HTTP/1.1 without one, in plain text; invokes need none either
        lines.append(b"Host: localhost\r\n")
    for name, value in request.raw_headers:
        lower = name.lower()
        if lower in _HOP_BY_HOP and not (upgrade and lower == b"connection"):
            continue
        lines.append(b"%s: %s\r\n" % (name, value))
    if not upgrade:
        lines.append(b"Content-Length: %d\r\nConnection: close\r\n" % len(request.body))
    lines.append(b"\r\n")
    return b"".join(lines)

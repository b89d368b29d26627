"""HTTP/1.1 on the wire, as the gateway's listening socket speaks it (`gateway.fastpath`):
a parsed request, headers read case-insensitively, an answer as response bytes, and the
head of a request forwarded to the aiohttp application. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from http import HTTPStatus

import orjson

from infless.gateway.invoke import JSON, Answer

_REASONS = {status.value: status.phrase.encode() for status in HTTPStatus}


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
    too_large: bool = False
    refused: bytes | None = None  # a 429 decided before its body was read

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


MAX_HEAD_BYTES = 64 * 1024  # a request line and headers longer than this get 431
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


_HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"transfer-encoding", b"content-length"})


def forwarded_head(request: Request, upgrade: bool) -> bytes:
    """The request line and headers sent on to aiohttp: its own body length, and one
    request per connection (an upgrade keeps its Connection header)."""
    lines = [b"%s %s HTTP/%s\r\n" % (request.method, request.url, request.version.encode())]
    for name, value in request.raw_headers:
        lower = name.lower()
        if lower in _HOP_BY_HOP and not (upgrade and lower == b"connection"):
            continue
        lines.append(b"%s: %s\r\n" % (name, value))
    if not upgrade:
        lines.append(b"Content-Length: %d\r\nConnection: close\r\n" % len(request.body))
    lines.append(b"\r\n")
    return b"".join(lines)

"""A request body's `Content-Encoding`, undone where the listening socket answers invokes
itself (`gateway.fastpath`; aiohttp undoes it for the routes it serves).

`gzip` (and `x-gzip`) and `deflate` (zlib-wrapped, or raw as some clients send it) are
decoded, never past `gateway.max_body_bytes` (a small body that inflates without bound is
refused, not decompressed); `identity` is the body as it came. A body that is not what its
encoding says is the client's error (400, naming the encoding), an encoding infless does not
speak is 415. Pure: no I/O, never imports torch.
"""

from __future__ import annotations

import zlib

from infless.errors import BadContentEncoding, PayloadTooLarge, UnsupportedMediaType

SUPPORTED = ("gzip", "deflate", "identity")
_GZIP_WBITS = 16 + zlib.MAX_WBITS
_ZLIB_WBITS = zlib.MAX_WBITS
_RAW_WBITS = -zlib.MAX_WBITS


def decode_body(content_encoding: str | None, body: bytes, limit_bytes: int) -> bytes:
    """`body` with its `Content-Encoding` undone (see the module docstring)."""
    encoding = (content_encoding or "identity").strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding in ("gzip", "x-gzip"):
        return _inflate(body, _GZIP_WBITS, encoding, limit_bytes)
    if encoding == "deflate":
        try:
            return _inflate(body, _ZLIB_WBITS, encoding, limit_bytes)
        except BadContentEncoding:
            return _inflate(body, _RAW_WBITS, encoding, limit_bytes)
    raise UnsupportedMediaType(
        f"Content-Encoding: {content_encoding!r} is not supported; send the body "
        f"uncompressed or as one of {', '.join(SUPPORTED)}"
    )


def _inflate(body: bytes, wbits: int, encoding: str, limit_bytes: int) -> bytes:
    inflater = zlib.decompressobj(wbits)
    try:
        decoded = inflater.decompress(body, limit_bytes + 1)
        if len(decoded) <= limit_bytes and not inflater.eof:
            decoded += inflater.flush()
    except zlib.error as exc:
        raise BadContentEncoding(
            f"Content-Encoding: {encoding}, but the body is not {encoding} data ({exc}); "
            "send it compressed as it says, or without the header"
        ) from None
    if len(decoded) > limit_bytes:
        raise PayloadTooLarge(
            f"the body, decompressed ({encoding}), exceeds gateway.max_body_bytes = {limit_bytes}"
        )
    if not inflater.eof:
        raise BadContentEncoding(
            f"Content-Encoding: {encoding}, but the body ends before its {encoding} stream "
            "does; send the whole compressed body"
        )
    return decoded

"""A request body's `Content-Encoding` undone where the fast path answers invokes
(`gateway.encoding`): gzip and deflate (zlib and raw), never past the body limit; a body
that lies about its encoding is 400, an encoding infless does not speak 415."""

from __future__ import annotations

import gzip
import zlib

import pytest

from infless.errors import BadContentEncoding, PayloadTooLarge, UnsupportedMediaType
from infless.gateway.encoding import decode_body

BODY = b'{"inputs": [1, 2, 3]}' * 10


def _raw_deflate(data: bytes) -> bytes:
    compressor = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return compressor.compress(data) + compressor.flush()


@pytest.mark.parametrize(
    ("encoding", "encoded"),
    [
        (None, BODY),
        ("identity", BODY),
        ("gzip", gzip.compress(BODY)),
        ("x-gzip", gzip.compress(BODY)),
        (" GZIP ", gzip.compress(BODY)),
        ("deflate", zlib.compress(BODY)),
        ("deflate", _raw_deflate(BODY)),  # what some clients send as deflate
    ],
)
def test_a_body_is_decoded_as_its_encoding_says(encoding: str | None, encoded: bytes) -> None:
    assert decode_body(encoding, encoded, limit_bytes=1 << 20) == BODY


@pytest.mark.parametrize(
    ("encoding", "encoded"),
    [
        ("gzip", b"hello, not gzip"),
        ("gzip", gzip.compress(BODY)[:-12]),  # truncated
        ("deflate", b"\x00\x01 not deflate either"),
    ],
)
def test_a_body_that_is_not_what_its_encoding_says_is_400(encoding: str, encoded: bytes) -> None:
    with pytest.raises(BadContentEncoding) as refused:
        decode_body(encoding, encoded, limit_bytes=1 << 20)
    assert refused.value.status == 400
    assert refused.value.code == "bad_content_encoding"
    assert f"Content-Encoding: {encoding}" in refused.value.message


def test_a_small_body_that_inflates_past_the_limit_is_refused_not_decompressed() -> None:
    bomb = gzip.compress(bytes(10 << 20))  # 10 MiB of zeros in ~10 KiB
    assert len(bomb) < 64 * 1024
    with pytest.raises(PayloadTooLarge) as refused:
        decode_body("gzip", bomb, limit_bytes=1 << 20)
    assert "gateway.max_body_bytes = 1048576" in refused.value.message


def test_an_encoding_infless_does_not_speak_is_415_naming_those_it_does() -> None:
    with pytest.raises(UnsupportedMediaType) as refused:
        decode_body("br", b"\x8b\x02\x80", limit_bytes=1 << 20)
    assert refused.value.status == 415
    assert "'br'" in refused.value.message
    assert "gzip" in refused.value.message

"""Every error a client can provoke at a real gateway is JSON `{"error", "code"}` with its
status — those of the listening socket (framing, limits, a body too large, an encoding that
lies) and those of the aiohttp application behind it (unknown routes, wrong methods, bodies
aiohttp cannot decode) — and the gateway keeps serving after each one. Raw sockets: no
client library tidies the requests up."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from tests.support.gateway import GatewayProcess, start_gateway
from tests.support.rawhttp import exchange

pytestmark = pytest.mark.timeout(180)

INPUTS = json.dumps({"inputs": [[[0.5] * 28] * 28]}).encode()
V2 = json.dumps(
    {"inputs": [{"name": "image", "shape": [1, 1, 28, 28], "datatype": "FP32",
                 "data": [0.5] * 784}]}
).encode()  # fmt: skip


def _request(method: str, target: bytes, *headers: bytes, body: bytes = b"") -> bytes:
    head = [b"%s %s HTTP/1.1" % (method.encode(), target), b"Host: gw", b"Connection: close"]
    head += [*headers, b"Content-Length: %d" % len(body)] if body or method == "POST" else headers
    return b"\r\n".join(head) + b"\r\n\r\n" + body


GZIP = b"Content-Encoding: gzip"
CASES = {
    # the listening socket (gateway.reader, gateway.encoding)
    "garbage framing": (b"GARBAGE / HTTP/1.1\r\n\r\n", 400, "bad_request"),
    "an unknown HTTP version": (b"GET /healthz HTTP/7.0\r\nHost: gw\r\n\r\n", 400, "bad_request"),
    "a request target too long": (
        _request("GET", b"/system/info?" + b"q" * 9000), 414, "uri_too_long"),
    "a header too large": (
        _request("GET", b"/system/info", b"X-Big: " + b"v" * 9000), 431, "header_too_large"),
    "too many headers": (
        _request("GET", b"/system/info", *(b"X-H%d: v" % i for i in range(150))),
        431, "too_many_headers"),
    "a body longer than the limit (head only)": (
        b"POST /system/functions HTTP/1.1\r\nHost: gw\r\nContent-Length: 99999999\r\n\r\n",
        413, "payload_too_large"),
    "an invoke whose gzip body is not gzip": (
        _request("POST", b"/function/digits", GZIP, body=b"not gzip"), 400,
        "bad_content_encoding"),
    "an invoke in an encoding infless does not speak": (
        _request("POST", b"/function/digits", b"Content-Encoding: br", body=b"\x8b\x02"),
        415, "unsupported_media_type"),
    # the aiohttp application behind it (gateway.errors.errors_as_json)
    "an unknown route": (_request("GET", b"/nope"), 404, "not_found"),
    "a wrong method": (_request("DELETE", b"/system/info"), 405, "method_not_allowed"),
    "a wrong method on a V2 route": (
        _request("DELETE", b"/v2/health/ready"), 405, "method_not_allowed"),
    "a V2 infer whose gzip body is not gzip": (
        _request("POST", b"/v2/models/digits/infer", GZIP, body=b"not gzip"), 400,
        "bad_content_encoding"),
    "a deploy whose gzip body is not gzip": (
        _request("POST", b"/system/functions", GZIP, body=b"not gzip"), 400,
        "bad_content_encoding"),
    "an invoke on a sub-path whose gzip body is not gzip": (
        _request("POST", b"/function/digits/sub", GZIP, body=b"not gzip"), 400,
        "bad_content_encoding"),
    "an unknown function": (
        _request("POST", b"/function/nope", body=INPUTS), 404, "function_not_found"),
}  # fmt: skip


def _serves(gw: GatewayProcess) -> None:
    status, body = exchange(gw, _request("POST", b"/function/digits", body=INPUTS))
    assert status == 200, body
    assert len(json.loads(body)["outputs"]) == 10


def test_every_error_is_json_and_the_gateway_keeps_serving(tmp_path: Path) -> None:
    functions = [{"name": "digits", "image": "mnist", "slo_ms": 500, "max_batch": 4}]
    with start_gateway(tmp_path, functions) as gw:
        for case, (request, status, code) in CASES.items():
            got, body = exchange(gw, request)
            assert got == status, (case, body)
            error = json.loads(body)
            assert error["code"] == code, (case, error)
            assert isinstance(error["error"], str), (case, error)
            assert error["error"], (case, error)
            _serves(gw)

        # what is well formed but unusual is served, not refused
        no_host = b"GET /system/info HTTP/1.1\r\nConnection: close\r\n\r\n"
        assert exchange(gw, no_host)[0] == 200
        compressed = gzip.compress(INPUTS)
        status, body = exchange(gw, _request("POST", b"/function/digits", GZIP, body=compressed))
        assert status == 200, body
        status, body = exchange(
            gw, _request("POST", b"/v2/models/digits/infer", GZIP, body=gzip.compress(V2))
        )
        assert status == 200, body
        assert gw.process.poll() is None

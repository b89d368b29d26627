"""The listening socket of a real gateway, spoken to byte by byte: invokes and management
requests mixed on one keep-alive connection (the fast path answers the first, aiohttp the
second), a chunked body, HTTP/1.0, and a streamed response (`/system/logs?follow=1`)
arriving while it streams."""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from pathlib import Path

import pytest

from tests.support.gateway import GatewayProcess, start_gateway

pytestmark = pytest.mark.timeout(180)

BODY = json.dumps({"inputs": [[[0.5] * 28] * 28]}).encode()


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 response with a Content-Length (what these routes answer)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, "the gateway closed the connection"
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    length = int(headers["content-length"])
    while len(rest) < length:
        rest += sock.recv(65536)
    return status, headers, rest[:length]


def connect(gw: GatewayProcess) -> socket.socket:
    host, port = gw.url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=30)


def test_invokes_and_management_requests_share_one_keep_alive_connection(
    tmp_path: Path,
) -> None:
    functions = [{"name": "digits", "image": "mnist", "slo_ms": 500, "max_batch": 4}]
    with start_gateway(tmp_path, functions) as gw, connect(gw) as sock:
        invoke = (
            b"POST /function/digits HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(BODY)
        ) + BODY
        info = b"GET /system/info HTTP/1.1\r\nHost: x\r\n\r\n"
        for request in (invoke, info, invoke, info):
            sock.sendall(request)
            status, headers, body = read_response(sock)
            assert status == 200, body
            document = json.loads(body)
            if request is invoke:
                assert len(document["outputs"]) == 10
                assert headers["x-infless-instance"].startswith("digits-")
            else:
                assert document["provider"]["provider"] == "infless"

        # a chunked body, decoded before the invoke sees it
        head = (
            b"POST /function/digits HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        half = len(BODY) // 2
        chunks = b"".join(
            b"%x\r\n%s\r\n" % (len(part), part) for part in (BODY[:half], BODY[half:])
        )
        sock.sendall(head + chunks + b"0\r\n\r\n")
        status, _, body = read_response(sock)
        assert status == 200, body


def test_http_1_0_and_a_streamed_response(tmp_path: Path) -> None:
    functions = [{"name": "digits", "image": "mnist", "slo_ms": 500, "max_batch": 4}]
    with start_gateway(tmp_path, functions) as gw:
        with connect(gw) as sock:
            sock.sendall(
                b"POST /function/digits HTTP/1.0\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n" % len(BODY) + BODY
            )
            status, headers, _ = read_response(sock)
            assert status == 200
            assert headers.get("connection") == "close"  # HTTP/1.0: one request
            assert sock.recv(1) == b""

        with connect(gw) as follower:
            follower.sendall(
                b"GET /system/logs?name=digits&follow=1&tail=0 HTTP/1.1\r\nHost: x\r\n\r\n"
            )
            follower.settimeout(20)
            time.sleep(0.5)  # following (aiohttp sends the head with the first line)
            # a line logged about the function after the follow began comes through at once:
            # its worker dies (a warning naming the instance joins the function's logs)
            (instance,) = gw.instances("digits")
            os.kill(instance["pid"], signal.SIGKILL)
            deadline = time.monotonic() + 20
            received = b""
            while b"digits" not in received and time.monotonic() < deadline:
                received += follower.recv(4096)
            assert received.startswith(b"HTTP/1.1 200")
            assert b"digits" in received

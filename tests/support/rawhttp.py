"""Requests to a real gateway written byte by byte on a socket of their own, and the one
response read back (until the gateway closes the connection, or by its Content-Length)."""

from __future__ import annotations

import socket

from tests.support.gateway import GatewayProcess


def exchange(gateway: GatewayProcess, data: bytes, timeout_s: float = 30.0) -> tuple[int, bytes]:
    """Send `data` (a whole request, or less) and read one response: status and body."""
    host, port = gateway.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
        sock.sendall(data)
        received = b""
        while b"\r\n\r\n" not in received:
            chunk = sock.recv(65536)
            assert chunk, f"the gateway closed the connection without answering: {received!r}"
            received += chunk
        head, body = received.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
        length = int(headers.get("content-length", "-1"))
        while length < 0 or len(body) < length:
            chunk = sock.recv(65536)
            if not chunk:
                break
            body += chunk
    return int(lines[0].split()[1]), body if length < 0 else body[:length]

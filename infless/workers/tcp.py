"""A worker's TCP side (a node agent's worker, see `infless.nodes`): listen, authenticate
the gateway's connection by its token, and exit when the agent is gone.

Worker side, blocking sockets; never imports torch. The gateway side is
`workers.handle.connect_tcp`.
"""

from __future__ import annotations

import hmac
import os
import socket
import threading

import msgspec

from infless.clock import perf_s
from infless.workers import protocol as p

HELLO_TIMEOUT_S = 5.0  # a connection that sends no hello in this time is not the gateway


def accept_gateway(request: p.ServeOn, reply: socket.socket) -> socket.socket | None:
    """Listen on `request.host`, tell the agent the port (on `reply`), and return the first
    connection that says `Hello` with the token; None when none came in time. The listener
    is closed before this returns: nobody else can connect afterwards."""
    listener = socket.create_server((request.host, 0))
    try:
        reply.sendall(p.encode_frame(p.Listening(listener.getsockname()[1])))
        deadline = perf_s() + request.accept_timeout_s
        while (remaining := deadline - perf_s()) > 0:
            listener.settimeout(remaining)
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                return None
            if _authenticated(conn, request.token, min(HELLO_TIMEOUT_S, remaining)):
                conn.settimeout(None)
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                return conn
            conn.close()
        return None
    finally:
        listener.close()


def _authenticated(conn: socket.socket, token: bytes, timeout_s: float) -> bool:
    conn.settimeout(timeout_s)
    try:
        header = _recv_exact(conn, p.FRAME_HEADER.size)
        (length,) = p.FRAME_HEADER.unpack(header)
        if length > p.MAX_HELLO_BYTES:
            return False
        hello = p.decode_to_worker(_recv_exact(conn, length))
    except (OSError, EOFError, msgspec.DecodeError):
        return False
    return isinstance(hello, p.Hello) and hmac.compare_digest(hello.token, token)


def _recv_exact(conn: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return bytes(data)


def exit_with(agent: socket.socket) -> None:
    """Exit the process when the agent's end of `agent` closes (the agent or its node is
    gone): a worker never outlives the agent that answers for it."""

    def watch() -> None:
        try:
            while agent.recv(4096):
                pass
        except OSError:
            pass
        os._exit(0)

    threading.Thread(target=watch, name="agent-watch", daemon=True).start()

"""Faults of the clients: a slow-loris (requests trickled a byte at a time) and 10,000 idle
connections. Both are bounded (`gateway.read_timeout_s`, `gateway.max_connections`): the
slow clients get a JSON 408 and are closed, the idle connections beyond the bound are
closed oldest first, the gateway's descriptors stay within the bound, and a client that
sends requests meanwhile gets every answer. All on 127.0.0.1."""

from __future__ import annotations

import contextlib
import resource
import selectors
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.faults import MNIST, MNIST_BODY, Load, open_fds, own_store
from tests.support.gateway import GatewayProcess, start_gateway

SLOW_CLIENTS = 20
IDLE_CONNECTIONS = 10_000
MAX_CONNECTIONS = 2_000


def _address(gateway: GatewayProcess) -> tuple[str, int]:
    host, _, port = gateway.url.removeprefix("http://").partition(":")
    return host, int(port)


def _read_until_closed(sock: socket.socket, timeout_s: float) -> bytes:
    sock.settimeout(timeout_s)
    received = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(65536):
            received += chunk
    return received


def test_slow_loris_clients_get_408_and_others_are_answered(tmp_path: Path) -> None:
    sections = {**own_store(tmp_path), "gateway": {"read_timeout_s": 1.0}}
    with start_gateway(tmp_path, [{**MNIST, "instances": 1}], sections) as gateway:
        reference = gateway.request("POST", "/function/mnist", raw=MNIST_BODY)[2]
        slow = [socket.create_connection(_address(gateway)) for _ in range(SLOW_CLIENTS)]
        head = b"POST /function/mnist HTTP/1.1\r\nHost: x\r\nX-Slow: "
        try:
            with Load(gateway.url, "/function/mnist", lambda _: MNIST_BODY, threads=2) as load:
                for sock in slow:
                    sock.sendall(head)
                deadline = time.monotonic() + 10
                cut: list[socket.socket] = []
                while len(cut) < SLOW_CLIENTS and time.monotonic() < deadline:
                    for sock in slow:
                        with contextlib.suppress(OSError):
                            sock.send(b"a")  # one byte at a time, never the end of a header
                    cut = [s for s in slow if _closed(s)]
                    time.sleep(0.2)
                replies = load.stop()
            answers = [_read_until_closed(sock, 5.0) for sock in slow]
        finally:
            for sock in slow:
                sock.close()
        assert all(a.startswith(b"HTTP/1.1 408 ") for a in answers), answers[0]
        assert all(b'"code":"request_timeout"' in a for a in answers)
        assert b"gateway.read_timeout_s" in answers[0]
        assert replies
        assert {(r.status, r.body) for r in replies} == {(200, reference)}


def _closed(sock: socket.socket) -> bool:
    """Whether the peer answered or closed (something to read, without taking it)."""
    sock.setblocking(False)
    try:
        return sock.recv(1, socket.MSG_PEEK) is not None
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        sock.setblocking(True)


@contextlib.contextmanager
def _idle_connections(address: tuple[str, int], count: int) -> Iterator[list[socket.socket]]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, count + 1024)), hard))
    opened: list[socket.socket] = []
    try:
        for _ in range(count):
            opened.append(socket.create_connection(address))
        yield opened
    finally:
        for sock in opened:
            sock.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_ten_thousand_idle_connections_are_bounded(tmp_path: Path) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < IDLE_CONNECTIONS + 1024:
        pytest.skip(f"the open-file hard limit ({hard}) is below {IDLE_CONNECTIONS} connections")
    sections = {**own_store(tmp_path), "gateway": {"max_connections": MAX_CONNECTIONS}}
    with start_gateway(tmp_path, [{**MNIST, "instances": 1}], sections) as gateway:
        reference = gateway.request("POST", "/function/mnist", raw=MNIST_BODY)[2]
        baseline_fds = open_fds(gateway.pid)
        with (
            Load(gateway.url, "/function/mnist", lambda _: MNIST_BODY, threads=2) as load,
            _idle_connections(_address(gateway), IDLE_CONNECTIONS) as idle,
        ):
            evicted = _wait_closed(idle, IDLE_CONNECTIONS - MAX_CONNECTIONS)
            assert open_fds(gateway.pid) <= baseline_fds + MAX_CONNECTIONS
            load.wait_answered(load.answered() + 20)
            replies = load.stop()
            assert gateway.request("POST", "/function/mnist", raw=MNIST_BODY)[2] == reference
        assert evicted[: IDLE_CONNECTIONS - MAX_CONNECTIONS] == list(
            range(IDLE_CONNECTIONS - MAX_CONNECTIONS)
        ), "the oldest idle connections went first"
        assert {(r.status, r.body) for r in replies} == {(200, reference)}


def _wait_closed(sockets: list[socket.socket], count: int, timeout_s: float = 60.0) -> list[int]:
    """Indexes of the sockets the gateway closed, in order, once at least `count` were."""
    selector = selectors.DefaultSelector()
    for index, sock in enumerate(sockets):
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ, index)
    closed: set[int] = set()
    deadline = time.monotonic() + timeout_s
    while len(closed) < count:
        assert time.monotonic() < deadline, f"{len(closed)} of {count} closed"
        for key, _ in selector.select(timeout=1.0):
            sock = sockets[key.data]
            with contextlib.suppress(OSError):
                assert sock.recv(1) == b"", "an idle connection is closed without an answer"
            closed.add(key.data)
            selector.unregister(sock)
    selector.close()
    return sorted(closed)

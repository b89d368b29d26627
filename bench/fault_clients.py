"""The clients of `bench.faults`: closed-loop load that records every reply (and keeps going
while no gateway listens), idle connections, slow-loris clients, and the polling of a
gateway's instances. Everything targets 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import resource
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True, slots=True)
class Reply:
    sent_s: float
    done_s: float
    status: int = 0  # 0: no HTTP answer (`error` says why)
    body: bytes = b""
    error: str = ""

    @property
    def code(self) -> str | None:
        with contextlib.suppress(ValueError, TypeError, KeyError):
            return str(json.loads(self.body)["code"])
        return None


def post(url: str, path: str, body: bytes, timeout_s: float = 60.0) -> Reply:
    """One POST on a fresh connection (a restarted gateway is seen as such)."""
    host, _, port = url.removeprefix("http://").partition(":")
    sent_s = time.monotonic()
    connection = http.client.HTTPConnection(host, int(port), timeout=timeout_s)
    try:
        connection.request("POST", path, body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        return Reply(sent_s, time.monotonic(), response.status, response.read())
    except (OSError, http.client.HTTPException) as exc:
        return Reply(sent_s, time.monotonic(), error=type(exc).__name__)
    finally:
        connection.close()


@dataclass
class Load:
    """`threads` clients sending `body` to `path` back to back until stopped. `url` may
    change while it runs (a gateway restarted on another port)."""

    url: str
    path: str
    body: bytes
    threads: int = 4
    replies: list[Reply] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _workers: list[threading.Thread] = field(default_factory=list)

    def __enter__(self) -> Load:
        for _ in range(self.threads):
            worker = threading.Thread(target=self._run, daemon=True)
            worker.start()
            self._workers.append(worker)
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def _run(self) -> None:
        while not self._stop.is_set():
            reply = post(self.url, self.path, self.body)
            with self._lock:
                self.replies.append(reply)
            if reply.error:
                self._stop.wait(0.02)

    def stop(self) -> list[Reply]:
        self._stop.set()
        for worker in self._workers:
            worker.join(timeout=120)
        with self._lock:
            return sorted(self.replies, key=lambda r: r.sent_s)

    def answered(self) -> int:
        with self._lock:
            return sum(1 for r in self.replies if r.status)


def latency_ms(replies: list[Reply], q: float) -> float:
    done = [(r.done_s - r.sent_s) * 1000.0 for r in replies if r.status == 200]
    return round(float(np.percentile(done, q)), 2) if done else float("nan")


def get(url: str, path: str) -> Any:
    with urllib.request.urlopen(url + path, timeout=30) as response:
        return json.loads(response.read())


def ready_instances(url: str, function: str) -> list[dict[str, Any]]:
    return [
        i
        for i in get(url, "/system/instances")
        if i["function"] == function and i["state"] == "ready"
    ]


def wait_ready_s(url: str, function: str, count: int, timeout_s: float = 300.0) -> float:
    """Seconds until `function` has `count` ready instances (polled every 20 ms)."""
    started = time.monotonic()
    while len(ready_instances(url, function)) < count:
        if time.monotonic() - started > timeout_s:
            raise RuntimeError(f"{function}: fewer than {count} ready in {timeout_s} s")
        time.sleep(0.02)
    return time.monotonic() - started


def address(url: str) -> tuple[str, int]:
    host, _, port = url.removeprefix("http://").partition(":")
    return host, int(port)


@contextlib.contextmanager
def idle_connections(url: str, count: int) -> Iterator[list[socket.socket]]:
    """`count` connections that never send a byte (the open-file limit raised to fit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, count + 1024)), hard))
    opened: list[socket.socket] = []
    try:
        for _ in range(count):
            opened.append(socket.create_connection(address(url)))
        yield opened
    finally:
        for sock in opened:
            sock.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@dataclass
class SlowLoris:
    """`count` clients each trickling one header byte every `interval_s`, reconnecting when
    cut; counts the 408s they get."""

    url: str
    count: int
    interval_s: float = 0.5
    cut_408: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> SlowLoris:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)

    def _open(self) -> socket.socket:
        sock = socket.create_connection(address(self.url))
        sock.sendall(b"POST /function/x HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        sock.setblocking(False)
        return sock

    def _run(self) -> None:
        socks = [self._open() for _ in range(self.count)]
        try:
            while not self._stop.wait(self.interval_s):
                for index, sock in enumerate(socks):
                    if self._answered(sock):
                        sock.close()
                        socks[index] = self._open()
                        continue
                    with contextlib.suppress(OSError):
                        sock.send(b"a")
        finally:
            for sock in socks:
                sock.close()

    def _answered(self, sock: socket.socket) -> bool:
        try:
            data = sock.recv(65536)
        except BlockingIOError:
            return False
        except OSError:
            return True
        if data.startswith(b"HTTP/1.1 408 "):
            self.cut_408 += 1
        return True

"""The sending engine: a lean HTTP/1.1 keep-alive connection pool for the hot send path.

I/O shell over `connection.Connection` (one request at a time each, pre-built request bytes,
httptools parsing). Every submitted request reports exactly once to its callback: a reply,
or no status with an error named as the aiohttp client named them (`ClientConnectorError`,
`ServerDisconnectedError`, `ClientOSError`, `ClientPayloadError`), `timeout`, or
`cancelled` when the pool closes.

* At most `limit` connections; a request finding none free waits, in order, for one to come
  back or for a new one to open (connections open on demand, each by a short task).
* A server closing a connection is routine: the connection leaves the pool and the next
  request opens another. A request whose reused connection closed before any byte of its
  answer (the keep-alive race) is retried once on a fresh one; otherwise it fails.
* Timeouts: every request has the same budget, so deadlines come in send order and one timer
  watches the oldest. An answer completing after its deadline counts as a timeout too; a
  request whose deadline passes mid-answer has its connection closed, since the late answer
  would otherwise land on the next request.
* Connects only to the host and port of the one base URL it is given (`check_target`), with
  the host resolved once.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from collections import deque
from collections.abc import Iterable
from urllib.parse import urlsplit

from loadgen.connection import (
    CANCELLED,
    CONNECT_FAILED,
    TIMEOUT,
    Connection,
    DoneCallback,
    Exchange,
    request_bytes,
)
from loadgen.functions import check_target

_now = time.perf_counter


class ConnectionPool:
    """`pool = ConnectionPool(url, limit, timeout_s); await pool.start(); pool.submit(...)`."""

    def __init__(
        self, base_url: str, limit: int, timeout_s: float, allow_remote: bool = False
    ) -> None:
        checked = check_target(base_url, allow_remote)
        parts = urlsplit(checked)
        self.host = parts.hostname or ""
        secure = parts.scheme == "https"
        self.port = parts.port or (443 if secure else 80)
        self.host_header = parts.netloc.rpartition("@")[2]
        self.prefix = parts.path.rstrip("/")
        self._ssl = ssl.create_default_context() if secure else None
        self._address = self.host
        self._family = socket.AF_UNSPEC
        self.limit = max(1, limit)
        self.timeout_s = timeout_s
        self.in_flight = 0
        self._open = 0  # connected or connecting
        self._connecting = 0
        self._idle: list[Connection] = []
        self._connections: set[Connection] = set()
        self._waiting: deque[Exchange] = deque()
        self._deadlines: deque[Exchange] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._closing = False
        self._loop: asyncio.AbstractEventLoop | None = None

    def request_bytes(
        self, path: str, content_type: str, body: bytes, headers: Iterable[tuple[str, str]] = ()
    ) -> bytes:
        return request_bytes(self.host_header, self.prefix + path, content_type, body, headers)

    async def start(self) -> None:
        """Resolve the host once (connections then open without a lookup each)."""
        self._loop = asyncio.get_running_loop()
        try:
            infos = await self._loop.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
        except OSError:
            return  # every connect will fail and say so
        if infos:
            family, _, _, _, sockaddr = infos[0]
            self._family, self._address = family, str(sockaddr[0])

    def submit(self, wire: bytes, on_done: DoneCallback) -> None:
        """Send `wire` on a free connection (or once one is free); `on_done` reports once."""
        exchange = Exchange(wire, on_done, _now() + self.timeout_s)
        self.in_flight += 1
        if self._closing:  # reported on the next turn: a callback never runs inside submit
            asyncio.get_running_loop().call_soon(self.finish, exchange, 0, {}, b"", CANCELLED)
            return
        self._deadlines.append(exchange)
        if self._timer is None:
            self._arm()
        if self._idle:
            self._idle.pop().send(exchange)
        else:
            self._waiting.append(exchange)
            self._fill()

    def finish(
        self, exchange: Exchange, status: int, headers: dict[str, str], body: bytes, error: str
    ) -> None:
        if exchange.finished:
            return
        exchange.finished = True
        self.in_flight -= 1
        done_t = _now()
        if status and done_t > exchange.deadline:
            status, headers, body, error = 0, {}, b"", TIMEOUT
        deadlines = self._deadlines
        while deadlines and deadlines[0].finished:
            deadlines.popleft()
        exchange.on_done(status, headers, body, error, done_t)

    def release(self, connection: Connection) -> None:
        """A connection with no exchange: give it the oldest waiting request, or keep it."""
        while self._waiting:
            exchange = self._waiting.popleft()
            if not exchange.finished:
                connection.send(exchange)
                return
        if self._closing:
            connection.abort()
        else:
            self._idle.append(connection)

    def lost(self, connection: Connection, exchange: Exchange | None, error: str) -> None:
        self._open -= 1
        self._connections.discard(connection)
        if connection in self._idle:
            self._idle.remove(connection)
        if exchange is not None and not exchange.finished:
            exchange.conn = None
            stale = connection.served > 0 and not connection.got_bytes
            if stale and not exchange.retried and not self._closing:
                exchange.retried = True
                self._waiting.appendleft(exchange)
            else:
                self.finish(exchange, 0, {}, b"", error)
        self._fill()

    def cancel_all(self) -> None:
        """Report every unfinished request as cancelled and drop their connections."""
        for exchange in list(self._deadlines):
            if not exchange.finished:
                if exchange.conn is not None:
                    exchange.conn.abort()
                self.finish(exchange, 0, {}, b"", CANCELLED)
        self._waiting.clear()

    async def close(self) -> None:
        self._closing = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.cancel_all()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        for connection in list(self._connections):
            connection.abort()
        self._idle.clear()
        await asyncio.sleep(0)  # let the transports report their loss

    # -- internals
    def _fill(self) -> None:
        """Open connections for waiting requests, within the limit."""
        while (
            not self._closing and self._connecting < len(self._waiting) and self._open < self.limit
        ):
            self._open += 1
            self._connecting += 1
            task = asyncio.get_running_loop().create_task(self._connect())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        connection = Connection(self)
        try:
            await loop.create_connection(
                lambda: connection,
                self._address,
                self.port,
                family=self._family,
                ssl=self._ssl,
                server_hostname=self.host if self._ssl is not None else None,
            )
        except asyncio.CancelledError:
            self._connecting -= 1
            self._open -= 1
            raise
        except Exception:  # refused, unreachable, TLS: the oldest waiting request says so
            self._connecting -= 1
            self._open -= 1
            self._fail_oldest_waiting(CONNECT_FAILED)
            self._fill()
            return
        self._connecting -= 1
        if connection.closed:  # lost already (counted by `lost`)
            self._fill()
            return
        self._connections.add(connection)
        if self._closing:
            connection.abort()
        else:
            self.release(connection)

    def _fail_oldest_waiting(self, error: str) -> None:
        while self._waiting:
            exchange = self._waiting.popleft()
            if not exchange.finished:
                self.finish(exchange, 0, {}, b"", error)
                return

    def _arm(self) -> None:
        if self._deadlines and not self._closing:
            delay_s = max(0.0, self._deadlines[0].deadline - _now())
            self._timer = asyncio.get_running_loop().call_later(delay_s, self._expire)

    def _expire(self) -> None:
        self._timer = None
        now = _now()
        deadlines = self._deadlines
        while deadlines and (deadlines[0].finished or deadlines[0].deadline <= now):
            exchange = deadlines.popleft()
            if not exchange.finished:
                connection = exchange.conn
                if connection is not None:  # the late answer must not reach the next request
                    connection.abort()
                self.finish(exchange, 0, {}, b"", TIMEOUT)
        self._arm()

"""Function logs for `GET /system/logs` (faas-cli logs): a bounded ring buffer per function.

Lines come from two places: the gateway's own log records about an instance (started,
failed, died — attributed by the instance id among the record's arguments), and every line
a worker writes to its stdout or stderr (`append`, called by `workers.output`'s pumps with
the function and instance the worker serves). The route
answers NDJSON `LogEntry` objects (faas-provider's shape) and can follow new lines until the
client leaves or the gateway shuts down. Memory is bounded; nothing is written to disk.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import orjson
from aiohttp import web

from infless.errors import BadRequest, FunctionNotFound

LINES_PER_FUNCTION = 2000
FOLLOW_CHECK_S = 1.0  # how often a follower notices that its client left
# Instance ids are "<function>-<6 hex digits>" (workers.pool).
_INSTANCE_ID = re.compile(r"^(?P<function>[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)-[0-9a-f]{6}$")


@dataclass(frozen=True, slots=True)
class LogEntry:
    seq: int
    name: str
    instance: str
    unix_s: float
    text: str

    def to_json(self, namespace: str) -> bytes:
        stamp = datetime.fromtimestamp(self.unix_s, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        entry = {
            "name": self.name,
            "namespace": namespace,
            "instance": self.instance,
            "timestamp": stamp,
            "text": self.text,
        }
        return orjson.dumps(entry) + b"\n"


class LogBuffer:
    """The last LINES_PER_FUNCTION lines of every function, and followers waiting for more."""

    def __init__(
        self, wall: Callable[[], float], lines_per_function: int = LINES_PER_FUNCTION
    ) -> None:
        self._wall = wall
        self._lines = lines_per_function
        self._by_function: dict[str, deque[LogEntry]] = {}
        self._seq = 0
        self._changed = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.closed = False

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def append(self, function: str, instance: str, text: str, unix_s: float) -> None:
        self._seq += 1
        lines = self._by_function.get(function)
        if lines is None:
            lines = self._by_function[function] = deque(maxlen=self._lines)
        lines.append(LogEntry(self._seq, function, instance, unix_s, text.rstrip("\n")))
        self._wake()

    def _wake(self) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._changed.set()
        else:
            loop.call_soon_threadsafe(self._changed.set)

    def knows(self, function: str) -> bool:
        return function in self._by_function

    def entries(
        self,
        function: str,
        instance: str | None = None,
        since_s: float | None = None,
        after_seq: int = 0,
    ) -> list[LogEntry]:
        return [
            e
            for e in self._by_function.get(function, ())
            if e.seq > after_seq
            and (instance is None or e.instance == instance)
            and (since_s is None or e.unix_s >= since_s)
        ]

    @property
    def seq(self) -> int:
        return self._seq

    async def follow(
        self, function: str, instance: str | None, alive: Callable[[], bool]
    ) -> AsyncIterator[LogEntry]:
        """Entries appended from now on, until `close()` or `alive()` turns False."""
        after_seq = self._seq
        while not self.closed and alive():
            self._changed.clear()
            fresh = self.entries(function, instance, after_seq=after_seq)
            for entry in fresh:
                after_seq = entry.seq
                yield entry
            if not fresh:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), FOLLOW_CHECK_S)

    def close(self) -> None:
        self.closed = True
        self._wake()


class GatewayLogHandler(logging.Handler):
    """Copies gateway log records that name an instance into that function's buffer."""

    def __init__(self, buffer: LogBuffer) -> None:
        super().__init__(level=logging.INFO)
        self._buffer = buffer

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args if isinstance(record.args, tuple) else ()
        for arg in args:
            if not isinstance(arg, str):
                continue
            match = _INSTANCE_ID.match(arg)
            if match is not None:
                with contextlib.suppress(Exception):
                    text = f"{record.levelname} {record.getMessage()}"
                    self._buffer.append(match["function"], arg, text, record.created)
                return


def _since(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise BadRequest(
            f"since = {text!r}: expected RFC 3339, e.g. 2024-05-01T12:00:00Z"
        ) from None


def _tail(text: str | None) -> int:
    if not text:
        return 0
    try:
        return int(text)
    except ValueError:
        raise BadRequest(f"tail = {text!r}: expected an integer (<= 0: everything)") from None


class LogsRoute:
    """`GET /system/logs?name=&instance=&tail=&follow=&since=` as NDJSON."""

    def __init__(self, namespaces: Callable[[str], str | None], buffer: LogBuffer) -> None:
        self._namespace_of = namespaces  # a deployed function's namespace, None if absent
        self._buffer = buffer

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        query = request.query
        name = query.get("name", "")
        if not name:
            raise BadRequest("name: is required, e.g. /system/logs?name=mnist")
        deployed_in = self._namespace_of(name)
        if deployed_in is None and not self._buffer.knows(name):
            raise FunctionNotFound(f"function {name!r} is not deployed and has no logs")
        namespace = deployed_in or "openfaas-fn"
        instance = query.get("instance") or None
        tail = _tail(query.get("tail"))
        since_s = _since(query.get("since"))
        follow = query.get("follow", "").lower() in ("1", "true", "yes")
        entries = self._buffer.entries(name, instance, since_s)
        if tail > 0:
            entries = entries[-tail:]
        following = self._buffer.follow(name, instance, lambda: _connected(request))
        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        with contextlib.suppress(ConnectionError):
            await response.prepare(request)
            for entry in entries:
                await response.write(entry.to_json(namespace))
            if follow:
                async for entry in following:
                    await response.write(entry.to_json(namespace))
            await response.write_eof()
        return response


def _connected(request: web.Request) -> bool:
    transport = request.transport
    return transport is not None and not transport.is_closing()

"""Worker output: a worker's stdout and stderr (one pipe), read line by line on the event loop.

Launchers give each worker its own pipe for fds 1 and 2 and hand back the read end
(`LaunchedWorker.output`). `OutputPumps.start(fd, function, instance)` reads it without
blocking (an asyncio read pipe, fed as data arrives) and splits the bytes into lines. A line
longer than `MAX_LINE_BYTES` is cut: the rest of it is dropped and the cut marked. Each
non-empty line goes to the sink with the function and instance it came from. A worker that
exits closes its end (with any children it started), and the pump then ends by itself.
Gateway side: never imports torch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

MAX_LINE_BYTES = 8192
Sink = Callable[[str, str, str], None]  # (function, instance, line)


class _Lines(asyncio.Protocol):
    """Splits a byte stream into bounded lines for `emit`; `done` resolves at EOF."""

    def __init__(self, emit: Callable[[str], None], max_line_bytes: int) -> None:
        self._emit = emit
        self._max = max_line_bytes
        self._partial = bytearray()
        self._cut = False
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        start = 0
        while (end := data.find(b"\n", start)) >= 0:
            self._hold(data, start, end)
            self._flush()
            start = end + 1
        self._hold(data, start, len(data))

    def _hold(self, data: bytes, start: int, end: int) -> None:
        if self._cut:
            return
        room = self._max - len(self._partial)
        if end - start > room:
            self._partial += data[start : start + room]
            self._cut = True
        else:
            self._partial += data[start:end]

    def _flush(self) -> None:
        text = self._partial.decode("utf-8", "replace").rstrip("\r")
        if self._cut:
            text += f" [line cut at {self._max} bytes]"
        self._partial.clear()
        self._cut = False
        if not text.strip():
            return
        try:
            self._emit(text)
        except Exception:  # a broken sink must not end the pump (nor fill the loop's log)
            log.exception("worker output: the sink failed")

    def connection_lost(self, exc: Exception | None) -> None:
        if self._partial or self._cut:
            self._flush()  # the last line had no newline
        if not self.done.done():
            self.done.set_result(None)


@dataclass(slots=True)
class Label:
    """Whose lines a pump's are: changed when a worker comes to serve another instance."""

    function: str
    instance: str


class OutputPumps:
    """Every worker's output pump, until its pipe ends (or `close`)."""

    def __init__(self, sink: Sink, max_line_bytes: int = MAX_LINE_BYTES) -> None:
        self._sink = sink
        self._max = max_line_bytes
        self._open: dict[asyncio.ReadTransport, asyncio.Future[None]] = {}

    def __len__(self) -> int:
        return len(self._open)

    async def start(self, fd: int, function: str, instance: str) -> Label:
        """Read `fd` (owned from now on) into the sink, tagged with function and instance
        (the returned label: change it and later lines carry the new tags)."""
        pipe = os.fdopen(fd, "rb", buffering=0)
        label = Label(function, instance)
        protocol = _Lines(lambda line: self._sink(label.function, label.instance, line), self._max)
        try:
            transport, _ = await asyncio.get_running_loop().connect_read_pipe(
                lambda: protocol, pipe
            )
        except BaseException:
            pipe.close()
            raise
        self._open[transport] = protocol.done
        protocol.done.add_done_callback(lambda _: self._open.pop(transport, None))
        return label

    async def close(self, grace_s: float = 2.0) -> None:
        """Let pumps read what their workers wrote last, up to `grace_s`; then stop them."""
        if self._open:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(grace_s):
                    await asyncio.gather(*self._open.values())
        for transport in list(self._open):
            transport.close()
        self._open.clear()

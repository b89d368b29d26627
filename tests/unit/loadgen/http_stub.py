"""A tiny HTTP/1.1 server on 127.0.0.1 for the engine's tests: plain asyncio streams, one
behaviour per path, and a log of what it saw (connections, requests, concurrency, headers).

Paths (any method): `/cl` Content-Length reply; `/chunked` chunked reply (`/chunked-error`: a
chunked 503 with a JSON error code); `/eof` body delimited by closing; `/close` a reply with
`Connection: close`; `/cut` a few bytes of a reply, then a close; `/drop-next` a normal reply,
then the connection's next request is dropped unanswered (the keep-alive race); `/slow` waits
`slow_s` first (or until the client closes); `/garbage` a reply that is not HTTP; `/count` a
Content-Length reply that records how many requests were in flight at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

TIMING = (
    b"X-Call-Id: c-{n}\r\nX-Duration-Seconds: 0.002\r\nX-Infless-Instance: i-0\r\n"
    b"X-Infless-Batch-Size: 3\r\nX-Infless-Queue-Ms: 1.5\r\nX-Infless-Exec-Ms: 0.25\r\n"
    b"X-Infless-Cold-Start: false\r\nContent-Type: application/json\r\n"
)


@dataclass
class Stub:
    slow_s: float = 1.0
    connections: int = 0
    requests: list[tuple[str, dict[str, str], bytes]] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    _drop_next: set[int] = field(default_factory=set)
    writers: set[asyncio.StreamWriter] = field(default_factory=set)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)  # set at each request

    def _timing(self) -> bytes:
        return TIMING.replace(b"{n}", str(len(self.requests)).encode())

    async def _read_request(
        self, reader: asyncio.StreamReader
    ) -> tuple[str, dict[str, str], bytes] | None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            return None
        line, *header_lines = head.decode("latin-1").split("\r\n")
        headers: dict[str, str] = {}
        for header in header_lines:
            if header:
                name, _, value = header.partition(":")
                headers[name.strip().lower()] = value.strip()
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        return line.split(" ")[1], headers, body

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        connection = self.connections
        self.writers.add(writer)
        try:
            while (request := await self._read_request(reader)) is not None:
                self.requests.append(request)
                self.arrived.set()
                if connection in self._drop_next:
                    return  # the keep-alive race: closed before any byte of the answer
                if not await self._answer(request[0], reader, writer, connection):
                    return
        finally:
            self.writers.discard(writer)
            with contextlib.suppress(ConnectionError):
                writer.close()

    async def _answer(
        self,
        path: str,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        connection: int,
    ) -> bool:
        """Write the path's reply; False when the connection must close."""
        timing = self._timing()
        body = b'{"outputs": [0.5]}'
        if path.endswith("/slow"):  # waits slow_s, or until the client gives up
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(reader.read(), self.slow_s)
        if path.endswith("/count"):
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            await asyncio.sleep(0.02)
            self.in_flight -= 1
        if path.endswith(("/chunked", "/chunked-error")):
            status = b"200 OK" if path.endswith("/chunked") else b"503 Service Unavailable"
            payload = body if status == b"200 OK" else b'{"error": "x", "code": "no_capacity"}'
            half = len(payload) // 2
            chunks = b"".join(
                f"{len(part):x}\r\n".encode() + part + b"\r\n"
                for part in (payload[:half], payload[half:])
            )
            writer.write(
                b"HTTP/1.1 " + status + b"\r\n" + timing + b"Transfer-Encoding: chunked\r\n\r\n"
            )
            await writer.drain()
            writer.write(chunks + b"0\r\n\r\n")
        elif path.endswith("/eof"):
            writer.write(b"HTTP/1.1 200 OK\r\n" + timing + b"Connection: close\r\n\r\n" + body)
            return False
        elif path.endswith("/cut"):
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{")
            await writer.drain()
            return False
        elif path.endswith("/garbage"):
            writer.write(b"SMTP ready\r\n\r\n")
            await writer.drain()
            return False
        else:
            close = path.endswith("/close")
            writer.write(
                b"HTTP/1.1 200 OK\r\n"
                + timing
                + (b"Connection: close\r\n" if close else b"")
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            if path.endswith("/drop-next"):
                self._drop_next.add(connection)
            if close:
                await writer.drain()
                return False
        await writer.drain()
        return True


@contextlib.asynccontextmanager
async def serve(stub: Stub) -> AsyncIterator[str]:
    """Serve on 127.0.0.1, a free port; yields the base URL."""
    server = await asyncio.start_server(stub.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.close()
        for writer in list(stub.writers):
            writer.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(server.wait_closed(), 2.0)

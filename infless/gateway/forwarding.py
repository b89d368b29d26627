"""Requests the listening socket does not answer itself, passed on to the aiohttp
application on its private unix socket, the response piped back as it streams (and a
protocol upgrade spliced both ways). A mixin of `gateway.fastpath.Connection`, whose
state it shares (a body over the limit never gets here: `gateway.reader` answers 413); it
answers 503 when the application's socket is gone (the gateway is stopping). Gateway side:
never imports torch.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from infless.gateway.http1 import Request, encode_answer, forwarded_head, json_error

if TYPE_CHECKING:
    from infless.gateway.listener import FastPath

log = logging.getLogger(__name__)


class Forwarding:
    """The forwarding half of a connection (see the module's docstring)."""

    _server: FastPath
    _transport: asyncio.Transport | None
    _writable: asyncio.Event  # cleared while the client's buffer is full
    _closing: bool
    _held: bytearray | None  # bytes after an upgrade, before the splice
    _upgraded: asyncio.StreamWriter | None

    async def _forward(self, request: Request, *, upgrade: bool = False) -> bool:
        """Pass the request to the aiohttp application and pipe its response back."""
        transport = self._transport
        assert transport is not None
        try:
            reader, writer = await asyncio.open_unix_connection(self._server.config.upstream)
        except OSError as exc:
            log.error("the gateway's application socket is gone: %s", exc)
            transport.write(
                encode_answer(json_error(503, "the gateway is stopping", "unavailable"), False)
            )
            return False
        writer.write(forwarded_head(request, upgrade) + bytes(request.body))
        if upgrade:
            return await self._splice(reader, writer)
        try:
            while chunk := await reader.read(1 << 16):
                if transport.is_closing():
                    break
                transport.write(chunk)
                await self._drain()
        finally:
            writer.close()
        return request.keep_alive and not transport.is_closing()

    async def _drain(self) -> None:
        """Wait while the client's socket buffer is full (a large streamed response)."""
        if not self._closing:
            await self._writable.wait()

    async def _splice(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        transport = self._transport
        assert transport is not None
        held, self._held = self._held or bytearray(), None
        self._upgraded = writer
        if held:
            writer.write(bytes(held))
        try:
            while chunk := await reader.read(1 << 16):
                transport.write(chunk)
                await self._drain()
        finally:
            writer.close()
        return False

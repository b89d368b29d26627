"""The live board's HTTP handlers: the page and its assets (shipped in the package, no CDN),
the event stream every open page reads, and a function's detail.

The stream is server-sent events: first the history of every function's series, then this
interval's snapshot, then one snapshot per interval as the hub offers it (a page that
cannot keep up skips snapshots, and is dropped when too far behind: `hub`). A page over
`ui.max_viewers` gets 503 `too_many_viewers`. Auth is the `/system` routes' (the
middleware covers `/ui` and everything under it). Registered in `gateway.routes`; gateway
side: never imports torch.
"""

from __future__ import annotations

import contextlib
from importlib import resources
from typing import TYPE_CHECKING

import orjson
from aiohttp import web

from infless.errors import FunctionNotFound, TooManyViewers
from infless.gateway.board.detail import function_detail

if TYPE_CHECKING:
    from infless.gateway.board.hub import Hub
    from infless.gateway.context import GatewayContext

ASSET_TYPES = {
    "index.html": "text/html",
    "draw.js": "text/javascript",
    "board.js": "text/javascript",
    "board.css": "text/css",
}
RETRY = b"retry: 2000\n\n"  # a page whose stream broke reconnects after 2 s


def load_assets() -> dict[str, bytes]:
    """The page's files, read once from the package (`infless/gateway/board/static`)."""
    static = resources.files("infless.gateway.board") / "static"
    return {name: (static / name).read_bytes() for name in ASSET_TYPES}


class BoardPages:
    def __init__(self, ctx: GatewayContext, hub: Hub) -> None:
        self._ctx = ctx
        self._hub = hub
        self._assets = load_assets()
        self._details: dict[str, tuple[int, bytes]] = {}  # by function: (hub tick, JSON)

    def _file(self, name: str) -> web.Response:
        return web.Response(
            body=self._assets[name],
            content_type=ASSET_TYPES[name],
            charset="utf-8",
            headers={"Cache-Control": "no-cache"},
        )

    async def page(self, request: web.Request) -> web.Response:
        return self._file("index.html")

    async def asset(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in ASSET_TYPES or name == "index.html":
            raise web.HTTPNotFound(reason=f"/ui/static/{name}: no such asset")
        return self._file(name)

    async def events(self, request: web.Request) -> web.StreamResponse:
        """The page's stream: the history, the snapshot now, then one per interval."""
        transport = request.transport
        hub = self._hub

        def drop() -> None:  # too far behind: end its stream, so a blocked write returns
            if transport is not None:
                transport.close()

        viewer = hub.join(on_drop=drop)
        if viewer is None:
            raise TooManyViewers(
                f"the live board has ui.max_viewers = {hub.max_viewers} pages open: close "
                "one, or raise ui.max_viewers"
            )
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                "X-Accel-Buffering": "no",  # a proxy in front must not hold the events
            }
        )
        try:
            await response.prepare(request)
            await response.write(RETRY + hub.history() + hub.frame())
            while (frame := await viewer.next()) is not None:
                await response.write(frame)
        except (ConnectionResetError, ConnectionError):
            pass  # the page went away (or was dropped): nothing more to send
        finally:
            hub.leave(viewer)
        with contextlib.suppress(ConnectionError):
            await response.write_eof()
        return response

    async def detail(self, request: web.Request) -> web.Response:
        """One function's detail (built at most once per interval for every page)."""
        name = request.match_info["name"]
        tick = self._hub.ticks
        cached = self._details.get(name)
        if cached is None or cached[0] != tick:
            if name not in self._ctx.deployed.deployed:
                self._details.pop(name, None)
                raise FunctionNotFound(f"function {name!r} is not deployed")
            cached = self._details[name] = (tick, orjson.dumps(function_detail(self._ctx, name)))
            for gone in set(self._details) - set(self._ctx.deployed.deployed):
                del self._details[gone]
        return web.Response(body=cached[1], content_type="application/json")

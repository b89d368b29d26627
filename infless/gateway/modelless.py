"""The model-less routes: register a model (its variants are generated in the
background), list and describe registered models with their variants, add an
application's goals, remove a model.

HTTP only: everything else is `control.modelless`'s, which answers typed views
(`modelless.views`); this module renders them to JSON. Registered in `routes`.

    POST   /system/register                 a registration (JSON) -> 202, "generating"
    GET    /system/models                   every registered model and its status
    GET    /system/variants/{model}         the model, its variants' profiles and states
    POST   /system/models/{model}/apps      {id, latencyMs, minAccuracy, costWeight}
    DELETE /system/models/{model}           the model, its variants and their functions
"""

from __future__ import annotations

import msgspec
import orjson
from aiohttp import web

from infless.control.modelless import ModellessService
from infless.errors import MalformedBody
from infless.gateway.packages import read_capped
from infless.packaging.archive import Limits


def _json(view: object, status: int = 200) -> web.Response:
    """`view` (a view struct, or a tuple of them) as a JSON response."""
    body = msgspec.json.encode(view)
    return web.Response(body=body, status=status, content_type="application/json")


class ModellessRoutes:
    """The handlers of the model-less routes, over one `ModellessService`."""

    def __init__(self, service: ModellessService, limits: Limits) -> None:
        self._service = service
        self._limits = limits

    async def _body(self, request: web.Request) -> object:
        raw = await read_capped(request, self._limits)
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise MalformedBody(f"the body is not JSON: {exc}") from None

    async def register(self, request: web.Request) -> web.Response:
        record = await self._service.register(await self._body(request))
        return _json(record, status=202)

    async def models(self, _: web.Request) -> web.Response:
        return _json(self._service.models())

    async def variants(self, request: web.Request) -> web.Response:
        return _json(self._service.describe(request.match_info["model"]))

    async def put_app(self, request: web.Request) -> web.Response:
        model = request.match_info["model"]
        app = self._service.put_app(model, await self._body(request))
        return _json(app, status=201)

    async def delete(self, request: web.Request) -> web.Response:
        await self._service.remove(request.match_info["model"])
        return web.Response(status=202)

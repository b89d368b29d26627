"""OpenFaaS-compatible management routes (`/system/*`), health, readiness, info, instances,
templates, metrics.

Shapes follow faas-provider's types strictly (integers as integers, string maps, RFC 3339
`createdAt`) because faas-cli decodes them with Go's encoding/json. PUT on an unknown
function answers 404: faas-cli deploys with PUT and falls back to POST only on 404. A
function that failed to deploy is listed with the rest, `state: "failed"` and its reason in
`lastError`, and can be deployed again or removed like any other.

The answers are the control plane's status views (`control.views`), rendered here: the
gateway is the only place views become JSON.
"""

from __future__ import annotations

import platform as host
from typing import TYPE_CHECKING, Any

import msgspec
import orjson
from aiohttp import web

from infless import __version__
from infless.control.readiness import Readiness
from infless.control.status import failed_view
from infless.control.views import InstanceStatusView
from infless.errors import InvalidDeployment, InvalidInput, MalformedBody
from infless.workers.status import KeptWorkerView

if TYPE_CHECKING:
    from infless.gateway.context import GatewayContext

JSON = "application/json"


def _json(data: object, status: int = 200) -> web.Response:
    """`data` as JSON: a view (a msgspec struct), or a list of them, or plain values."""
    return web.Response(status=status, body=msgspec.json.encode(data), content_type=JSON)


async def _read_json(request: web.Request) -> Any:
    try:
        return orjson.loads(await request.read())
    except orjson.JSONDecodeError as exc:
        raise MalformedBody(f"the body is not valid JSON: {exc}") from None


def readiness_answer(readiness: Readiness | None) -> web.Response:
    """200 with what settled when the gateway is ready (`control.readiness`), else 503."""
    if readiness is None:
        return _json({"ready": True})
    view = readiness.report().view()
    if view.ready:
        return _json(view)
    waiting = ", ".join(view.starting)
    error = f"not ready: waiting for {waiting} to start; GET /system/functions shows them"
    return _json(msgspec.structs.replace(view, error=error, code="not_ready"), status=503)


class SystemRoutes:
    """The handlers of `/system/*`, `/healthz`, `/readyz` and `/metrics` (registered in
    `routes`)."""

    def __init__(self, ctx: GatewayContext) -> None:
        self._ctx = ctx

    async def healthz(self, request: web.Request) -> web.Response:
        """Liveness: the gateway answers (readiness is `readyz`)."""
        return web.Response(text="OK")

    async def readyz(self, request: web.Request) -> web.Response:
        return readiness_answer(self._ctx.readiness)

    async def info(self, request: web.Request) -> web.Response:
        version = {"sha": "infless", "release": __version__, "commit_message": ""}
        return _json(
            {
                "provider": {
                    "provider": "infless",
                    "orchestration": "local",
                    "version": {"sha": "infless", "release": __version__},
                },
                "version": version,
                "arch": host.machine(),
                "isolation": self._ctx.isolation(),
            }
        )

    async def list_functions(self, request: web.Request) -> web.Response:
        namespace = request.query.get("namespace")
        listed = self._ctx.deployed.functions()
        return _json([f for f in listed if not namespace or f.namespace == namespace])

    async def get_function(self, request: web.Request) -> web.Response:
        failed = self._ctx.frontend.failed(request.match_info["name"])
        if failed is not None:
            return _json(failed_view(failed))
        function = self._ctx.frontend.find(request.match_info["name"])
        detail = self._ctx.deployed.detail(
            function,
            cold_start_policy=self._ctx.prewarm.describe(function.name),
            admission=self._ctx.frontend.describe(function),
        )
        return _json(detail)

    async def create(self, request: web.Request) -> web.Response:
        spec = await self._ctx.functions.create(await _read_json(request))
        return _json(self._ctx.deployed.function(spec.name), status=202)

    async def update(self, request: web.Request) -> web.Response:
        spec = await self._ctx.functions.update(await _read_json(request))
        return _json(self._ctx.deployed.function(spec.name), status=202)

    async def delete(self, request: web.Request) -> web.Response:
        body = await _read_json(request)
        name = body.get("functionName") if isinstance(body, dict) else None
        if not isinstance(name, str) or not name:
            raise InvalidDeployment('functionName: is required, e.g. {"functionName": "mnist"}')
        failed = self._ctx.frontend.failed(name)
        name = failed.spec.name if failed is not None else self._ctx.frontend.find(name).name
        await self._ctx.functions.remove(name)
        return web.Response(status=202)

    async def scale(self, request: web.Request) -> web.Response:
        name = self._ctx.frontend.find(request.match_info["name"]).name
        body = await _read_json(request)
        replicas = body.get("replicas") if isinstance(body, dict) else None
        if not isinstance(replicas, int) or isinstance(replicas, bool):
            raise InvalidDeployment('replicas: an integer is required, e.g. {"replicas": 2}')
        self._ctx.functions.scale(name, replicas)
        return _json(self._ctx.deployed.function(name), status=202)

    async def instances(self, request: web.Request) -> web.Response:
        """Live instances; `state=idle`: the idle workers kept for transformation (`all`:
        both)."""
        function = request.query.get("function")
        state = request.query.get("state", "live")
        if state not in ("live", "idle", "all"):
            raise InvalidInput(f"state={state!r}: use live (the default), idle or all")
        instances = self._ctx.instances
        live: list[InstanceStatusView | KeptWorkerView] = []
        idle: list[InstanceStatusView | KeptWorkerView] = []
        if state != "idle":
            live += instances.live(function)
        if state != "live":
            idle += [w for w in instances.kept() if not function or w.function == function]
        return _json(live + idle)

    async def templates(self, request: web.Request) -> web.Response:
        """The per-model template processes instances are forked from (workers.templates)."""
        return _json(self._ctx.instances.templates())

    async def servers(self, request: web.Request) -> web.Response:
        """The servers instances run on: capacity, what is free, and what each reports."""
        return _json(self._ctx.servers.servers())

    async def metrics(self, request: web.Request) -> web.Response:
        ctx = self._ctx
        for name, function in ctx.deployed.deployed.items():
            ctx.metrics.set_instances(name, function.router.ready_count)
        return web.Response(
            body=ctx.metrics.render(),
            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
        )

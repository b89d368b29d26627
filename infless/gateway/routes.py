"""Every HTTP route of the gateway, registered here and nowhere else, plus the middlewares
and the hooks the routes need (the function log handler, scrape-time metrics).

Wiring only. The handlers live in:
- `invoke`: `/function/{name}`;
- `system`: `/system/*`, `/healthz`, `/readyz`, `/metrics`;
- `secrets`, `packages`, `modelless`: `/system/secrets`, `/system/packages`,
  `/system/register`, `/system/models`, `/system/variants`;
- `v2/`: the Open Inference Protocol; `logs`; `openapi`;
- `board/`: the live board at `/ui`.
The composition root (`app`) calls `middlewares` and `install`. The log handler and the
board start and stop as aiohttp cleanup contexts. Must not hold request logic.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import orjson
from aiohttp import web

from infless.config import Config
from infless.gateway.auth import AuthSettings, auth_middleware, load_auth
from infless.gateway.board.hub import Hub
from infless.gateway.board.pages import BoardPages
from infless.gateway.board.readings import BoardReader
from infless.gateway.context import GatewayContext
from infless.gateway.errors import errors_as_json, json_errors, v2_errors
from infless.gateway.invoke import InvokeHandler
from infless.gateway.logs import GatewayLogHandler, LogsRoute
from infless.gateway.modelless import ModellessRoutes
from infless.gateway.openapi import openapi_document
from infless.gateway.packages import PackageRoutes
from infless.gateway.resources import PlatformCollector
from infless.gateway.secrets import SecretsRoutes
from infless.gateway.server_series import ServerCollector
from infless.gateway.system import SystemRoutes
from infless.gateway.v2.infer import V2InferHandler
from infless.gateway.v2.repository import RepositoryRoutes
from infless.gateway.v2.routes import MODEL_PATHS, V2Routes
from infless.packaging.archive import Limits

LOGGER_NAME = "infless"  # gateway log records about instances land in the function logs


def auth_middlewares(config: Config, settings: AuthSettings | None = None) -> list[Any]:
    """The auth middleware when basic auth or an invoke token is configured, else none."""
    settings = settings if settings is not None else load_auth(config)
    return [auth_middleware(settings)] if settings.enabled else []


def middlewares(config: Config, settings: AuthSettings | None = None) -> list[Any]:
    """Every error as JSON (outermost: it sees what the others raise), then auth (when
    configured)."""
    return [errors_as_json, *auth_middlewares(config, settings)]


def board_hub(ctx: GatewayContext) -> Hub:
    """The live board's producer: one snapshot per `ui.interval_s` for every open page."""
    ui = ctx.config.ui
    reader = BoardReader(ctx)
    return Hub(
        clock=ctx.clock,
        interval_s=ui.interval_s,
        history_s=ui.history_s,
        read=reader.readings,
        state=reader.state,
        max_viewers=ui.max_viewers,
        max_skipped=ui.max_skipped,
    )


def route_table(ctx: GatewayContext, board: BoardPages | None = None) -> list[web.RouteDef]:
    """Every route, in one list: method, path, handler (`/ui` with a board)."""
    invoke = InvokeHandler(ctx.frontend).__call__  # a coroutine function: aiohttp wants one
    system = SystemRoutes(ctx)
    secrets = SecretsRoutes(ctx.secrets)
    v2 = V2Routes(ctx.frontend, ctx.readiness)
    infer = V2InferHandler(ctx.frontend).__call__
    package_limits = Limits(ctx.config.gateway.max_package_bytes)
    packages = PackageRoutes(ctx.packages, package_limits)
    repository = RepositoryRoutes(
        frontend=ctx.frontend,
        deployed=ctx.deployed,
        functions=ctx.functions,
        packages=ctx.packages,
        limits=package_limits,
    )
    modelless = ModellessRoutes(ctx.modelless, package_limits)
    document = orjson.dumps(openapi_document())

    async def openapi(_: web.Request) -> web.Response:
        return web.Response(body=document, content_type="application/json")

    def namespace_of(name: str) -> str | None:
        function = ctx.deployed.deployed.get(name)
        return None if function is None else function.spec.namespace

    routes = [
        web.route("*", "/function/{name}", invoke),
        web.route("*", "/function/{name}/{path:.*}", invoke),
        web.get("/healthz", system.healthz),
        web.get("/readyz", system.readyz),
        web.get("/system/info", json_errors(system.info)),
        web.get("/system/functions", json_errors(system.list_functions)),
        web.post("/system/functions", json_errors(system.create)),
        web.put("/system/functions", json_errors(system.update)),
        web.delete("/system/functions", json_errors(system.delete)),
        web.get("/system/function/{name}", json_errors(system.get_function)),
        web.post("/system/scale-function/{name}", json_errors(system.scale)),
        web.get("/system/instances", json_errors(system.instances)),
        web.get("/system/templates", json_errors(system.templates)),
        web.get("/system/servers", json_errors(system.servers)),
        web.post("/system/packages", json_errors(packages.upload)),
        web.get("/system/packages/{digest}", json_errors(packages.manifest)),  # and HEAD
        web.get("/system/logs", json_errors(LogsRoute(namespace_of, ctx.logs))),
        web.get("/system/secrets", json_errors(secrets.list)),
        web.post("/system/secrets", json_errors(secrets.create)),
        web.put("/system/secrets", json_errors(secrets.update)),
        web.delete("/system/secrets", json_errors(secrets.delete)),
        web.post("/system/register", json_errors(modelless.register)),
        web.get("/system/models", json_errors(modelless.models)),
        web.get("/system/variants/{model}", json_errors(modelless.variants)),
        web.post("/system/models/{model}/apps", json_errors(modelless.put_app)),
        web.delete("/system/models/{model}", json_errors(modelless.delete)),
        web.get("/metrics", system.metrics),
        web.get("/openapi.json", openapi),
        web.get("/v2", v2.server_metadata),
        web.get("/v2/health/live", v2.live),
        web.get("/v2/health/ready", v2.ready),
        web.post("/v2/repository/index", v2_errors(repository.index)),
        web.post("/v2/repository/models/{name}/load", v2_errors(repository.load)),
        web.post("/v2/repository/models/{name}/unload", v2_errors(repository.unload)),
    ]
    if board is not None:
        routes += [
            web.get("/ui", board.page),
            web.get("/ui/", board.page),
            web.get("/ui/static/{name}", json_errors(board.asset)),
            web.get("/ui/events", json_errors(board.events)),
            web.get("/ui/function/{name}", json_errors(board.detail)),
        ]
    for base in MODEL_PATHS:
        routes += [
            web.get(base, v2_errors(v2.metadata)),
            web.get(f"{base}/ready", v2_errors(v2.model_ready)),
            web.get(f"{base}/config", v2_errors(v2.config)),
            web.post(f"{base}/infer", infer),
        ]
    return routes


def install(app: web.Application, ctx: GatewayContext) -> None:
    """Register every route, and the hooks that route logs and metrics to the gateway."""
    hub = board_hub(ctx) if ctx.config.ui.enabled else None
    app.add_routes(route_table(ctx, None if hub is None else BoardPages(ctx, hub)))
    deployed = ctx.deployed
    collector = PlatformCollector(
        ctx.instances.instances, lambda: deployed.deployed, ctx.gpus, ctx.gpu_sharing
    )
    ctx.metrics.add_collector(collector)
    ctx.metrics.add_collector(ServerCollector(deployed, ctx.instances, ctx.servers))
    handler = GatewayLogHandler(ctx.logs)

    async def function_logs(_: web.Application) -> AsyncIterator[None]:
        """Gateway log records about instances join the function logs, from the first
        start-up step to the last clean-up step (this context starts first)."""
        ctx.logs.bind(asyncio.get_running_loop())
        logging.getLogger(LOGGER_NAME).addHandler(handler)
        yield
        logging.getLogger(LOGGER_NAME).removeHandler(handler)
        collector.close()

    async def board(_: web.Application) -> AsyncIterator[None]:
        if hub is not None:
            hub.start()
        yield
        if hub is not None:
            await hub.stop()

    async def shutdown(_: web.Application) -> None:
        """Before the server drains: log followers and the board's pages end, so the drain
        does not wait on them."""
        ctx.logs.close()
        if hub is not None:
            hub.close()

    app.cleanup_ctx.extend([function_logs, board])
    app.on_shutdown.append(shutdown)

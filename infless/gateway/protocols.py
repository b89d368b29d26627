"""Installs the ecosystem protocols on the gateway application: the Open Inference Protocol
routes, `/openapi.json`, `/system/logs`, scrape-time metrics and the auth middleware.

Wiring only (the composition root calls `auth_middlewares` and `install`); the behaviour
lives in `v2/`, `openapi`, `logs`, `resources` and `auth`. Must not hold request logic.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web

from infless.config import Config
from infless.gateway.auth import auth_middleware, load_auth
from infless.gateway.errors import json_errors
from infless.gateway.logs import GatewayLogHandler, LogBuffer, LogsRoute
from infless.gateway.openapi import openapi_document
from infless.gateway.resources import PlatformCollector
from infless.gateway.v2.routes import V2Routes

if TYPE_CHECKING:
    from infless.app import Platform

LOGGER_NAME = "infless"  # gateway log records about instances land in the function logs


def auth_middlewares(config: Config) -> list[Any]:
    """The auth middleware when basic auth or an invoke token is configured, else none."""
    settings = load_auth(config)
    return [auth_middleware(settings)] if settings.enabled else []


def install(app: web.Application, platform: Platform, logs: LogBuffer) -> None:
    collector = PlatformCollector(platform.pool.all_instances, lambda: platform.pool.functions)
    platform.metrics.add_collector(collector)
    document = orjson.dumps(openapi_document())

    async def openapi(_: web.Request) -> web.Response:
        return web.Response(body=document, content_type="application/json")

    app.router.add_get("/openapi.json", openapi)
    app.router.add_get("/system/logs", json_errors(LogsRoute(platform, logs)))
    V2Routes(platform).register(app)
    handler = GatewayLogHandler(logs)

    async def startup(_: web.Application) -> None:
        logs.bind(asyncio.get_running_loop())
        logging.getLogger(LOGGER_NAME).addHandler(handler)

    async def shutdown(_: web.Application) -> None:
        logs.close()  # log followers end, so the server's drain does not wait on them

    async def cleanup(_: web.Application) -> None:
        logging.getLogger(LOGGER_NAME).removeHandler(handler)
        collector.close()

    app.on_startup.insert(0, startup)
    app.on_shutdown.append(shutdown)
    app.on_cleanup.append(cleanup)

"""Composition root: wires config, clock, registry, pool, metrics and routes; no logic.

`Platform` holds the subsystems of one gateway; `create_app` returns the aiohttp
application whose startup restores deployed functions and whose cleanup drains every
instance and stops every worker it started.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from infless.clock import Clock, RealClock
from infless.cluster.cpus import CpuAllocator, usable_cpus
from infless.config import Config
from infless.gateway.invoke import InvokeHandler
from infless.gateway.metrics import GatewayMetrics
from infless.gateway.system import SystemRoutes
from infless.models.resolver import PackageResolver
from infless.registry.service import FunctionService
from infless.registry.store import FunctionRegistry
from infless.workers.launcher import SubprocessLauncher, WorkerLauncher
from infless.workers.pool import DeployedFunction, WorkerPool

log = logging.getLogger(__name__)

PLATFORM_KEY = web.AppKey("platform", object)
REGISTRY_FILE = "registry.sqlite"


@dataclass
class Platform:
    config: Config
    clock: Clock
    metrics: GatewayMetrics
    registry: FunctionRegistry
    pool: WorkerPool
    functions: FunctionService


def make_launcher(config: Config) -> WorkerLauncher:
    if config.workers.launcher == "zygote":
        from infless.workers.zygote import ZygoteLauncher

        return ZygoteLauncher()
    return SubprocessLauncher()


def build_platform(config: Config, clock: Clock | None = None) -> Platform:
    clock = clock or RealClock()
    state_dir = config.state_dir
    state_dir.mkdir(parents=True, exist_ok=True)
    metrics = GatewayMetrics()

    def instances_changed(function: DeployedFunction) -> None:
        metrics.set_instances(function.spec.name, function.router.ready_count)

    pool = WorkerPool(
        config,
        clock,
        make_launcher(config),
        CpuAllocator(usable_cpus(config.workers.reserved_cpus)),
        on_instance_change=instances_changed,
    )
    registry = FunctionRegistry(state_dir / REGISTRY_FILE)
    resolver = PackageResolver(Path(config.models.repository))
    functions = FunctionService(clock, registry, pool, resolver)
    return Platform(config, clock, metrics, registry, pool, functions)


def create_app(config: Config, clock: Clock | None = None) -> web.Application:
    platform = build_platform(config, clock)
    app = web.Application(client_max_size=config.gateway.max_body_bytes)
    app[PLATFORM_KEY] = platform
    app.router.add_route("*", "/function/{name}", InvokeHandler(platform))
    app.router.add_route("*", "/function/{name}/{path:.*}", InvokeHandler(platform))
    SystemRoutes(platform).register(app)

    async def startup(_: web.Application) -> None:
        await platform.functions.restore(list(config.functions))

    async def cleanup(_: web.Application) -> None:
        await platform.pool.stop()
        platform.registry.close()

    app.on_startup.append(startup)
    app.on_cleanup.append(cleanup)
    return app

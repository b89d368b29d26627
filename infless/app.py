"""Composition root: wires config, clock, registry, pool, metrics and routes; no logic.

`Platform` holds the subsystems of one gateway; `create_app` returns the aiohttp
application whose startup restores deployed functions and whose cleanup drains every
instance and stops every worker it started.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from infless.clock import Clock, RealClock
from infless.cluster.cgroups import CpuConfiner
from infless.cluster.cpus import CpuAllocator, usable_cpus
from infless.coldstart.manager import PrewarmManager
from infless.coldstart.policies import build_policy
from infless.config import Config
from infless.gateway import protocols
from infless.gateway.invoke import InvokeHandler
from infless.gateway.logs import LogBuffer
from infless.gateway.metrics import GatewayMetrics
from infless.gateway.system import SystemRoutes
from infless.models.resolver import PackageResolver
from infless.registry.service import FunctionService
from infless.registry.store import FunctionRegistry
from infless.scaling.autoscaler import Autoscaler
from infless.scaling.profiled import load_profiled_predictor
from infless.weights.reclaimer import Reclaimer
from infless.weights.store import TensorStore
from infless.workers.boot import InstanceBooter
from infless.workers.launcher import SubprocessLauncher, WorkerLauncher
from infless.workers.pool import DeployedFunction, WorkerPool
from infless.workers.templates import TemplateCache
from infless.workers.zygote import ZygoteLauncher

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
    prewarm: PrewarmManager
    store: TensorStore | None
    reclaimer: Reclaimer | None
    logs: LogBuffer
    autoscaler: Autoscaler | None
    confiner: CpuConfiner | None


def make_launcher(config: Config) -> WorkerLauncher:
    if config.workers.launcher == "zygote":
        return ZygoteLauncher()
    return SubprocessLauncher()


def store_root(config: Config) -> Path:
    """The configured store root, else one tmpfs directory per state directory."""
    if config.store.root:
        return Path(config.store.root)
    digest = hashlib.blake2b(str(config.state_dir.resolve()).encode(), digest_size=6).hexdigest()
    return Path("/dev/shm") / f"infless-store-{digest}"  # noqa: S108 - a dedicated subdir


def make_store(config: Config, clock: Clock) -> TensorStore | None:
    if not config.store.enabled:
        return None
    return TensorStore(
        store_root(config),
        clock,
        capacity_bytes=config.store.capacity_bytes or None,
        keepalive_s=config.store.keepalive_s,
    )


def build_platform(config: Config, clock: Clock | None = None) -> Platform:
    clock = clock or RealClock()
    state_dir = config.state_dir
    state_dir.mkdir(parents=True, exist_ok=True)
    metrics = GatewayMetrics()

    def instances_changed(function: DeployedFunction) -> None:
        metrics.set_instances(function.spec.name, function.router.ready_count)

    store = make_store(config, clock)
    launcher = make_launcher(config)
    confiner = CpuConfiner(parent="infless") if config.workers.cgroups else None
    templates = (
        TemplateCache(launcher, store, config.workers.start_timeout_s)
        if store is not None and isinstance(launcher, ZygoteLauncher) and config.workers.templates
        else None
    )
    booter = InstanceBooter(config, clock, launcher, store, confiner, templates)
    cores = usable_cpus(config.workers.reserved_cpus)
    autoscaled = config.scaling.policy != "none"
    pool = WorkerPool(
        config,
        clock,
        launcher,
        CpuAllocator(cores),
        on_instance_change=instances_changed,
        booter=booter,
        autoscaled=autoscaled,
    )
    autoscaler = (
        Autoscaler(
            pool, clock, config.scaling, len(cores),
            profiles=lambda keys: load_profiled_predictor(state_dir, keys),
        )
        if autoscaled
        else None
    )  # fmt: skip
    reclaimer = (
        None
        if store is None
        else Reclaimer(
            store,
            clock,
            lambda: [*pool.instance_ids(), *booter.holder_ids()],
            config.store.reclaim_interval_s,
        )
    )
    registry = FunctionRegistry(state_dir / REGISTRY_FILE)
    resolver = PackageResolver(Path(config.models.repository))
    functions = FunctionService(clock, registry, pool, resolver)
    coldstart = config.coldstart
    prewarm = PrewarmManager(
        pool,
        clock,
        build_policy(coldstart.policy, coldstart.params),
        tick_s=coldstart.tick_s,
        release_grace_s=coldstart.release_grace_s,
        scale_to_zero_default=coldstart.scale_to_zero,
    )
    logs = LogBuffer(clock.wall)
    return Platform(
        config, clock, metrics, registry, pool, functions, prewarm, store, reclaimer, logs,
        autoscaler, confiner,
    )  # fmt: skip


def create_app(config: Config, clock: Clock | None = None) -> web.Application:
    platform = build_platform(config, clock)
    app = web.Application(
        client_max_size=config.gateway.max_body_bytes,
        middlewares=protocols.auth_middlewares(config),
    )
    app[PLATFORM_KEY] = platform
    invoke = InvokeHandler(platform).__call__  # a coroutine function: aiohttp wants one
    app.router.add_route("*", "/function/{name}", invoke)
    app.router.add_route("*", "/function/{name}/{path:.*}", invoke)
    SystemRoutes(platform).register(app)
    protocols.install(app, platform, platform.logs)

    async def startup(_: web.Application) -> None:
        if platform.store is not None:
            report = await asyncio.to_thread(platform.store.adopt_or_clean)
            log.info("tensor store %s: %s", platform.store.root, report)
        if platform.reclaimer is not None:
            platform.reclaimer.start()
        await platform.pool.start()
        await platform.functions.restore(list(config.functions))
        platform.prewarm.start()
        if platform.autoscaler is not None:
            platform.autoscaler.start()

    async def cleanup(_: web.Application) -> None:
        await platform.prewarm.stop()
        if platform.autoscaler is not None:
            await platform.autoscaler.stop()
        await platform.pool.stop()
        if platform.confiner is not None:
            platform.confiner.remove_parent()
        platform.registry.close()
        if platform.reclaimer is not None:
            await platform.reclaimer.stop()
        if platform.store is not None:
            platform.store.close()
            if config.store.clear_on_shutdown:
                shutil.rmtree(platform.store.root, ignore_errors=True)

    app.on_startup.append(startup)
    app.on_cleanup.append(cleanup)
    return app

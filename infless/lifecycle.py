"""The order in which one gateway's platform starts and stops.

Each resource is one aiohttp cleanup context: an async generator that starts the resource,
yields while the gateway serves, and stops it. `contexts` lists them in dependency order.
aiohttp runs them in that order at start-up and in reverse at clean-up, and it stops only
those that started. So the order below is the whole story:

1. the files and groups the gateway holds (registry, variants, tenants, its cgroup);
2. the tenants' sandboxes (before the store settles its tenants' directories);
3. the tensor store and its reclaimer;
4. the GPU monitor;
5. the pool with its servers (a cluster's nodes join it; the pool stops before they go);
6. the deployed functions and the registered models;
7. the control loops (tickers) and the event loop's lag probe.

Wiring only: no policy, and nothing here is read on the request path.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

from aiohttp import web

from infless.nodes.backend import attach_cluster

if TYPE_CHECKING:
    from infless.app import Platform

log = logging.getLogger(__name__)

CleanupContext = Callable[[web.Application], AsyncIterator[None]]


class PlatformLifecycle:
    """One cleanup context per resource of `platform` (see the module docstring)."""

    def __init__(self, platform: Platform) -> None:
        self._platform = platform

    def contexts(self) -> list[CleanupContext]:
        """The platform's cleanup contexts, in the order they start."""
        return [
            self.held_files,
            self.sandboxes,
            self.tensor_store,
            self.gpu_monitor,
            self.pool,
            self.functions,
            self.loops,
        ]

    async def held_files(self, _: web.Application) -> AsyncIterator[None]:
        """The registries' databases and the gateway's cgroup: closed last."""
        yield
        if self._platform.confiner is not None:
            self._platform.confiner.remove_parent()
        self._platform.registry.close()
        self._platform.variant_store.close()
        if self._platform.tenants is not None:
            self._platform.tenants.close()

    async def sandboxes(self, _: web.Application) -> AsyncIterator[None]:
        if self._platform.sandboxes is not None:
            await self._platform.sandboxes.start(remote_nodes=self._platform.config.cluster.enabled)
        yield

    async def tensor_store(self, _: web.Application) -> AsyncIterator[None]:
        """Adopt (or clean) what a predecessor left, reclaim while serving, then close.
        Its directories are group-readable by their tenants when sandboxed."""
        store = self._platform.store
        if store is not None:
            report = await asyncio.to_thread(store.adopt_or_clean)
            log.info("tensor store %s: %s", store.root, report)
        if self._platform.reclaimer is not None:
            self._platform.reclaimer.start()
        yield
        if self._platform.reclaimer is not None:
            await self._platform.reclaimer.stop()
        if store is not None:
            store.close()
            if self._platform.config.store.clear_on_shutdown:
                shutil.rmtree(store.root, ignore_errors=True)

    async def gpu_monitor(self, _: web.Application) -> AsyncIterator[None]:
        if self._platform.gpu is not None:
            self._platform.gpu.monitor.start()
        yield
        if self._platform.gpu is not None:
            await self._platform.gpu.monitor.stop()

    async def pool(self, _: web.Application) -> AsyncIterator[None]:
        """The pool, then the cluster whose nodes join it. The pool stops first: it stops
        the workers on those nodes."""
        await self._platform.pool.start()
        if self._platform.config.cluster.enabled:
            self._platform.cluster = await attach_cluster(
                self._platform.config, self._platform.pool
            )
        yield
        await self._platform.pool.stop()
        if self._platform.cluster is not None:
            await self._platform.cluster.close()

    async def functions(self, _: web.Application) -> AsyncIterator[None]:
        """The deployed functions (ready once each of them settled), then the models."""
        started = await self._platform.functions.restore(list(self._platform.config.functions))
        self._platform.readiness.started(started)
        self._platform.modelless.restore()
        yield
        await self._platform.modelless.stop()

    async def loops(self, _: web.Application) -> AsyncIterator[None]:
        for ticker in self._platform.tickers:
            ticker.start()
        self._platform.loop_lag.start()
        yield
        for ticker in self._platform.tickers:
            await ticker.stop()
        await self._platform.loop_lag.stop()


def contexts(platform: Platform) -> list[CleanupContext]:
    """The platform's cleanup contexts, in the order they start."""
    return PlatformLifecycle(platform).contexts()

"""The node agent: what one server runs for the gateway (a Ray actor on each node).

It owns what is per machine: the zygote and templates, the tensor store, cgroups and
the worker processes (a `ProcessStarter`, as the gateway has for its own machine), and
the packages shipped to it (by digest, in a `PackageStore` under its node directory). On `start` it
boots a worker the usual way (over a socketpair), then has it listen for the gateway over
TCP with a fresh token (`workers.protocol.ServeOn`) and returns the endpoint and the
token: requests never pass through the agent or Ray. Its workers exit when it is gone
(`workers.tcp.exit_with`); an agent that starts again (Ray restarts it) adopts the store
it left and counts its starts, and its report says what it runs.
Ray-free: `nodes.ray_backend` wraps it in an actor; tests call it directly. Every method
first finishes the agent's own start, so a restarted actor needs no extra call.
Node side: never imports torch (its workers do).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import os
import secrets
import shutil
from functools import partial
from pathlib import Path

import msgspec
import psutil

from infless.clock import RealClock
from infless.cluster.cgroups import CpuConfiner
from infless.cluster.cpus import usable_cpus
from infless.cluster.gpus import discover_gpus
from infless.config import Config
from infless.nodes import wire
from infless.nodes.factory import make_starter, make_store, store_root
from infless.packaging.archive import Limits
from infless.packaging.store import PackageStore
from infless.types import InstanceConfig, WorkerRuntime
from infless.weights.reclaimer import Reclaimer, tenant_bytes
from infless.weights.store import TensorStore
from infless.workers import protocol as p
from infless.workers.boot import ProcessStarter
from infless.workers.handle import ProcessWorkerHandle, WorkerHandle
from infless.workers.starting import BootOrder

log = logging.getLogger(__name__)

STARTS_FILE = "agent-starts"


class NodeAgent:
    def __init__(
        self,
        config_json: bytes,
        node: str,
        host: str,
        cpu_ids: list[int] | None = None,
        *,
        ephemeral: bool = False,
    ) -> None:
        """`config_json`: the gateway's config; `node`: this node's id; `host`: the address
        the gateway reaches it at; `cpu_ids`: the cores it may give workers (None: all
        this process may use); `ephemeral`: a node of a local cluster, whose directory and
        store go when the agent closes."""
        config = msgspec.json.decode(config_json, type=Config)
        self.node = node
        self.host = host
        self._short = node[:12]
        self.dir, store_dir = node_paths(config, node)
        self._config = msgspec.structs.replace(
            config, store=msgspec.structs.replace(config.store, root=str(store_dir))
        )
        self.cpu_ids = list(cpu_ids) if cpu_ids is not None else list(usable_cpus(0))
        self._ephemeral = ephemeral
        self._started: asyncio.Task[None] | None = None
        self._workers: dict[str, WorkerHandle] = {}
        self._store: TensorStore | None = None
        self._starter: ProcessStarter | None = None
        self._reclaimer: Reclaimer | None = None
        self._adopted = 0
        self._starts = 0
        self._tenants: dict[str, set[str]] = {}  # package digest -> tenants it started for
        self._released: set[str] = set()  # released before (or without) a worker
        self.packages = PackageStore(self.dir)  # shipped packages, by digest
        self._memory_bytes = 0
        self._gpu_pct: list[int] = []

    async def _ready(self) -> ProcessStarter:
        if self._started is None:
            self._started = asyncio.create_task(self._start())
        await asyncio.shield(self._started)
        assert self._starter is not None
        return self._starter

    async def _start(self) -> None:
        config, clock = self._config, RealClock()
        self.dir.mkdir(parents=True, exist_ok=True)
        self._memory_bytes = psutil.virtual_memory().total  # what the node has: read once
        self._gpu_pct = list(discover_gpus().share_capacity_pct)
        self._starts = _count_start(self.dir / STARTS_FILE)
        self._store = make_store(config, clock)
        if self._store is not None:
            report = await asyncio.to_thread(self._store.adopt_or_clean)
            self._adopted = report.adopted_files
            self._reclaimer = Reclaimer(
                self._store, clock, self._holders, config.store.reclaim_interval_s
            )
            self._reclaimer.start()
        parent = f"infless-{self._short}"
        confiner = (
            CpuConfiner(parent=parent, nice=config.workers.nice) if config.workers.cgroups else None
        )
        self._starter = make_starter(
            config, self._store, confiner, output=self._output, cgroup_parent=parent
        )
        await self._starter.start()
        log.info(
            "node agent %s on %s: cores %s, start %d, adopted %d stored tensors",
            self._short,
            self.host,
            self.cpu_ids,
            self._starts,
            self._adopted,
        )

    def _holders(self) -> list[str]:
        templates = [] if self._starter is None else self._starter.holder_ids()
        return [*self._workers, *templates]

    def _output(self, function: str, instance: str, line: str) -> None:
        log.info("[%s %s] %s", function, instance, line)

    # -- packages -----------------------------------------------------------------------
    async def has_package(self, digest: str) -> bool:
        await self._ready()
        return self.packages.find(digest) is not None

    async def put_package(self, digest: str, archive: bytes) -> None:
        """Store a package (a tar.gz of its files, `packaging.archive.write_archive`) as the
        gateway's repository stores an upload: unpacked, validated, its digest checked."""
        await self._ready()
        limits = Limits(self._config.gateway.max_package_bytes)
        stored = await asyncio.to_thread(
            self.packages.add_archive, self.packages.new_staging(), io.BytesIO(archive), limits
        )
        if stored.digest != digest:
            raise ValueError(f"the package shipped as {digest} hashes to {stored.digest}")

    # -- instances ----------------------------------------------------------------------
    async def start(self, order_bytes: bytes) -> bytes:
        """Boot one worker and have it listen for the gateway; `wire.Started` bytes."""
        starter = await self._ready()
        order = wire.decode_order(order_bytes)
        package_dir = self.packages.find(order.package)
        if package_dir is None:
            raise FileNotFoundError(f"package {order.package} was not shipped to this node")
        worker_id = order.instance_id
        booted = await starter.boot(
            BootOrder(
                instance_id=worker_id,
                tenant=order.tenant,
                package_dir=package_dir,
                config=InstanceConfig(order.batch_size, order.cpus, order.gpu_pct),
                cpu_ids=tuple(order.cpu_ids),
                warmup_batch_sizes=tuple(order.warmup_batch_sizes),
                shared_weights=order.shared_weights,
                on_death=partial(self._gone, worker_id),
                function=order.function,
                instance=order.instance,
                runtime=WorkerRuntime(dict(order.env), (), order.memory_limit_bytes),
            )
        )
        handle = booted.handle
        self._workers[worker_id] = handle
        if worker_id in self._released:  # the gateway gave up on it while it started
            await self.release(worker_id)
            raise RuntimeError(f"{worker_id} was released while it started")
        self._tenants.setdefault(order.package, set()).add(order.tenant)
        token = secrets.token_bytes(32)
        timeout_s = self._config.workers.start_timeout_s
        try:
            assert isinstance(handle, ProcessWorkerHandle)
            listening = await handle.serve_on(p.ServeOn(self.host, token, timeout_s), timeout_s)
        except BaseException:
            await self.release(worker_id)
            raise
        return wire.encode(
            wire.Started(
                host=self.host,
                port=listening.port,
                token=token,
                ready=booted.ready,
                spawn_ms=booted.start.spawn_ms,
            )
        )

    def _gone(self, worker_id: str) -> None:
        """A worker exited: the gateway saw its connection close and will release it."""
        self._workers.pop(worker_id, None)

    async def kill(self, worker_id: str) -> None:
        handle = self._workers.get(worker_id)
        if handle is not None and isinstance(handle, ProcessWorkerHandle):
            handle.kill()

    async def release(self, worker_id: str) -> None:
        """The instance is gone for good: kill its worker if it still runs, then free its
        store holds, template use and cgroups."""
        starter = await self._ready()
        await self.kill(worker_id)
        if self._workers.pop(worker_id, None) is None:
            self._released.add(worker_id)  # still starting, perhaps: not served once it is
        await starter.release(worker_id)

    def death_cause(self, worker_id: str) -> str | None:
        return None if self._starter is None else self._starter.death_cause(worker_id)

    async def report(self) -> bytes:
        await self._ready()
        store = self._store
        entries = [] if store is None else store.entries()
        return wire.encode(
            wire.NodeReport(
                node=self.node,
                host=self.host,
                cpu_ids=self.cpu_ids,
                memory_bytes=self._memory_bytes,
                gpu_pct=self._gpu_pct,
                workers=sorted(self._workers),
                store_tensors=len(entries),
                store_bytes=sum(e.size_bytes for e in entries),
                adopted_tensors=self._adopted,
                packages=len(self.packages.digests()),
                agent_pid=os.getpid(),
                agent_starts=self._starts,
                similarity=await asyncio.to_thread(self._similarity),
                store_tenant_bytes=tenant_bytes(entries),
            )
        )

    def _similarity(self) -> dict[str, float]:
        """Tetris θ per (tenant, package) this node started: what of its tensors it holds."""
        if self._store is None:
            return {}
        return {
            f"{tenant}/{digest}": self._store.similarity(self.packages.path_for(digest), tenant)
            for digest, tenants in self._tenants.items()
            for tenant in tenants
        }

    async def close(self) -> None:
        """Stop every worker, the zygote and templates; an ephemeral node's files go too."""
        if self._started is None:
            return
        with contextlib.suppress(Exception):
            await self._started
        for worker_id, handle in list(self._workers.items()):
            with contextlib.suppress(Exception):
                await handle.stop(2.0)
            if self._starter is not None:
                await self._starter.release(worker_id)
        self._workers.clear()
        if self._starter is not None:
            await self._starter.close()
        if self._reclaimer is not None:
            await self._reclaimer.stop()
        if self._store is not None:
            self._store.close()
            if self._ephemeral or self._config.store.clear_on_shutdown:
                shutil.rmtree(self._store.root, ignore_errors=True)
        if self._ephemeral:
            shutil.rmtree(self.dir, ignore_errors=True)


def node_paths(config: Config, node: str) -> tuple[Path, Path]:
    """A node's directory (shipped packages, its start count) and its store's root."""
    root = store_root(config)
    return Path(config.cluster.node_dir) / node[:12], root.with_name(f"{root.name}-{node[:12]}")


def remove_node_files(config: Config, node: str) -> None:
    """Remove what an ephemeral node left, even when its agent died without closing."""
    for path in node_paths(config, node):
        shutil.rmtree(path, ignore_errors=True)


def _count_start(path: Path) -> int:
    try:
        starts = int(path.read_text()) + 1
    except (OSError, ValueError):
        starts = 1
    path.write_text(str(starts))
    return starts

"""The gateway's side of one node: an `InstanceStarter` whose workers its node agent runs.

`RemoteStarter.boot` ships the function's package to the node once (by digest), asks the
agent to start the worker, connects to the worker over TCP with the token the agent handed
out, and returns a `RemoteWorkerHandle`: from then on the gateway and the worker exchange
the same frames as over a local socketpair, and the agent is not on the request path.
`AgentLink` is what it needs of an agent: the Ray actor's proxy (`nodes.ray_backend`), or
a `NodeAgent` itself in tests. Gateway side: never imports torch or Ray.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
from collections.abc import Coroutine, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from infless.nodes import wire
from infless.packaging.archive import write_archive
from infless.packaging.digest import package_digest
from infless.types import WorkerRuntime
from infless.workers.handle import RemoteWorkerHandle, WorkerStartFailed, connect_tcp
from infless.workers.launcher import LaunchedWorker
from infless.workers.starting import Booted, BootOrder, RuntimeSupport, StarterDefaults
from infless.workers.status import TemplateView, WorkerView

if TYPE_CHECKING:
    from infless.control.functions import DeployedFunction

log = logging.getLogger(__name__)


class AgentLink(Protocol):
    async def has_package(self, digest: str) -> bool: ...

    async def put_package(self, digest: str, archive: bytes) -> None: ...

    async def start(self, order_bytes: bytes) -> bytes: ...

    async def kill(self, worker_id: str) -> None: ...

    async def release(self, worker_id: str) -> None: ...

    async def report(self) -> bytes: ...


class RemoteStarter(StarterDefaults):
    def __init__(self, link: AgentLink, node: str, connect_timeout_s: float = 10.0) -> None:
        self.link = link
        self.node = node
        self._connect_timeout_s = connect_timeout_s
        self.report: wire.NodeReport | None = None
        self._digests: dict[Path, str] = {}
        self._shipping: dict[str, asyncio.Task[None]] = {}
        self._endpoints: dict[str, str] = {}
        self._background: set[asyncio.Task[Any]] = set()

    async def start(self) -> None:
        if self.report is None:  # read when the node joined, usually
            await self.refresh()

    async def refresh(self) -> wire.NodeReport:
        """Read the node's report again (cores, workers, store, what it holds of whom)."""
        self.report = wire.decode_report(await self.link.report())
        return self.report

    # -- packages -----------------------------------------------------------------------
    async def _digest(self, package_dir: Path) -> str:
        digest = self._digests.get(package_dir)
        if digest is None:
            digest = await asyncio.to_thread(package_digest, package_dir)
            self._digests[package_dir] = digest
        return digest

    async def _ship(self, package_dir: Path) -> str:
        """The package's digest, once the node has it (one transfer per package and node)."""
        digest = await self._digest(package_dir)
        task = self._shipping.get(digest)
        if task is None or (task.done() and task.exception() is not None):
            task = asyncio.ensure_future(self._put(package_dir, digest))
            self._shipping[digest] = task
        await asyncio.shield(task)
        return digest

    async def _put(self, package_dir: Path, digest: str) -> None:
        if not await self.link.has_package(digest):
            archive = await asyncio.to_thread(_archive, package_dir)
            await self.link.put_package(digest, archive)
            log.info("shipped %s (%d bytes) to node %s", digest[:19], len(archive), self.node)

    # -- instances ----------------------------------------------------------------------
    async def boot(self, order: BootOrder) -> Booted:
        if order.runtime.secrets:
            raise WorkerStartFailed("secrets are not sent to cluster nodes")
        digest = await self._ship(order.package_dir)
        config = order.config
        request = wire.StartOrder(
            instance_id=order.instance_id,
            tenant=order.tenant,
            package=digest,
            batch_size=config.batch_size,
            cpus=config.cpus,
            gpu_pct=config.gpu_pct,
            cpu_ids=list(order.cpu_ids),
            warmup_batch_sizes=list(order.warmup_batch_sizes),
            shared_weights=order.shared_weights,
            function=order.function,
            instance=order.instance,
            env=dict(order.runtime.env),
            memory_limit_bytes=order.runtime.memory_limit_bytes,
        )
        worker_id = order.instance_id
        try:
            started = wire.decode_started(await self.link.start(wire.encode(request)))
            sock = await connect_tcp(
                started.host, started.port, started.token, self._connect_timeout_s
            )
        except BaseException:
            self._later(self.link.release(worker_id))
            raise
        launched = LaunchedWorker(started.ready.pid, sock, started.spawn_ms)
        handle = RemoteWorkerHandle(
            launched,
            kill_remote=lambda: self._later(self.link.kill(worker_id)),
            on_death=lambda _: order.on_death(),
        )
        try:
            await handle.attach()
            await handle.ping(self._connect_timeout_s)  # the worker took the token
        except BaseException as exc:
            handle.kill()
            await handle.stop(1.0)
            if isinstance(exc, Exception):
                raise WorkerStartFailed(f"node {self.node}: worker refused the gateway") from exc
            raise
        self._endpoints[worker_id] = f"{started.host}:{started.port}"
        start = msgspec.structs.replace(started.ready.start, spawn_ms=started.spawn_ms)
        return Booted(handle, started.ready, start)

    async def release(self, instance_id: str) -> None:
        self._endpoints.pop(instance_id, None)
        with contextlib.suppress(Exception):  # a node that left has nothing to free
            await self.link.release(instance_id)

    def _later(self, call: Coroutine[Any, Any, None]) -> None:
        async def quietly() -> None:
            with contextlib.suppress(Exception):
                await call

        task = asyncio.ensure_future(quietly())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def close(self) -> None:
        await asyncio.gather(*self._background, return_exceptions=True)

    # -- reading ------------------------------------------------------------------------
    def holder_ids(self) -> list[str]:
        return []  # the node's store is the agent's: it counts its own holders

    def describe(self, instance_id: str) -> WorkerView:
        return WorkerView(node=self.node, endpoint=self._endpoints.get(instance_id))

    def templates(self) -> list[TemplateView]:
        return []

    async def runtime_support(self, runtime: WorkerRuntime) -> RuntimeSupport:
        secrets = "secrets are not sent to cluster nodes" if runtime.secrets else None
        return RuntimeSupport(None, secrets)

    def death_cause(self, instance_id: str) -> str | None:
        return None

    def affinities(self, functions: Iterable[DeployedFunction]) -> Mapping[str, float]:
        """Per function, the Tetris similarity of this node's store (its last report)."""
        if self.report is None:
            return {}
        similarity = self.report.similarity
        affinity = {}
        for function in functions:
            digest = self._digests.get(function.package_dir)
            value = None if digest is None else similarity.get(f"{function.spec.tenant}/{digest}")
            if value:
                affinity[function.name] = value
        return affinity


def _archive(package_dir: Path) -> bytes:
    buffer = io.BytesIO()
    write_archive(package_dir, buffer)
    return buffer.getvalue()

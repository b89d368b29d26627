"""Starting instances: the `InstanceStarter` port and `ProcessStarter`, its real worker side.

The pool asks a starter to take one instance from nothing to a worker with its model loaded
and its batch sizes timed (`boot`), and to let go of what an instance held once it is gone
(`release`). `ProcessStarter` publishes the weights to the tensor store (or not), launches
the worker (forked from the model's template when the store and the zygote allow one, see
`templates`), confines it to its cores (cgroups, else affinity) and loads the package.
`workers.inprocess.InProcessStarter` runs a callable instead, for tests and simulations.
A starter raises on any failure; the pool decides what a failure means.
Gateway side: never imports torch.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import msgspec

from infless.types import InstanceConfig
from infless.weights.store import StoreError
from infless.weights.stored import StoredTensor
from infless.workers import protocol as p
from infless.workers.forkclient import ZygoteError
from infless.workers.handle import ProcessWorkerHandle, WorkerHandle
from infless.workers.launcher import LaunchedWorker, WorkerLauncher
from infless.workers.templates import TemplateCache

if TYPE_CHECKING:
    from pathlib import Path

    from infless.cluster.cgroups import Confinement, CpuConfiner
    from infless.weights.store import TensorStore

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BootOrder:
    """Everything a starter needs to know about the instance it starts."""

    instance_id: str
    tenant: str
    package_dir: Path
    config: InstanceConfig
    cpu_ids: tuple[int, ...]
    warmup_batch_sizes: tuple[int, ...]
    # the weights go through the shared tensor store (a TorchScript or torch.export program
    # carries its own: it is loaded whole)
    shared_weights: bool = True
    on_death: Callable[[], None] = field(default=lambda: None, compare=False)


@dataclass(frozen=True, slots=True)
class Booted:
    handle: WorkerHandle
    ready: p.Ready
    start: p.StartBreakdown  # the worker's breakdown, with the spawn time filled in


class InstanceStarter(Protocol):
    async def start(self) -> None: ...

    async def boot(self, order: BootOrder) -> Booted: ...

    async def release(self, instance_id: str) -> None: ...

    async def close(self) -> None: ...

    def holder_ids(self) -> list[str]: ...

    def describe(self, instance_id: str) -> dict[str, object]: ...

    def templates(self) -> list[dict[str, object]]: ...


@dataclass(frozen=True, slots=True)
class StartSettings:
    start_timeout_s: float
    warmup_rounds: int
    private_weights: bool  # no store: clone the weights into private memory (bench baseline)
    nice: int = 0  # workers' niceness: the gateway's event loop goes first on shared cores


class ProcessStarter:
    def __init__(
        self,
        settings: StartSettings,
        launcher: WorkerLauncher,
        store: TensorStore | None = None,
        confiner: CpuConfiner | None = None,
        templates: TemplateCache | None = None,
    ) -> None:
        self._settings = settings
        self.launcher = launcher
        self.store = store
        self._confiner = confiner
        self._templates = templates
        self._confinements: dict[str, Confinement] = {}

    async def start(self) -> None:
        """Prepare the launcher (the zygote imports torch once, here, not on first deploy)."""
        await self.launcher.start()

    async def boot(self, order: BootOrder) -> Booted:
        stored = None
        if self.store is not None and order.shared_weights:
            stored = await asyncio.to_thread(
                self.store.publish, order.package_dir, order.tenant, holder=order.instance_id
            )
        launched = await self._launch(order.instance_id, order.tenant, order.package_dir, stored)
        handle = ProcessWorkerHandle(launched, on_death=lambda _: order.on_death())
        self._confine(order, launched.pid)
        request = p.LoadModel(
            package_dir=str(order.package_dir),
            cpus=order.config.cpus,
            cpu_ids=list(order.cpu_ids),
            gpu_pct=order.config.gpu_pct,
            warmup_batch_sizes=list(order.warmup_batch_sizes),
            warmup_rounds=self._settings.warmup_rounds,
            store_tensors=stored,
            private_weights=stored is None and self._settings.private_weights,
            nice=self._settings.nice,
        )
        try:
            ready = await handle.load(request, self._settings.start_timeout_s)
        except BaseException:
            handle.kill()
            raise
        start = msgspec.structs.replace(ready.start, spawn_ms=launched.spawn_ms)
        return Booted(handle, ready, start)

    async def _launch(
        self, instance_id: str, tenant: str, package_dir: Path, stored: list[StoredTensor] | None
    ) -> LaunchedWorker:
        """Fork from the model's template when there can be one, else from the launcher."""
        if self._templates is not None and stored is not None:
            try:
                launched = await self._templates.launch(
                    instance_id, tenant, str(package_dir), stored
                )
            except (ZygoteError, StoreError, OSError) as exc:
                log.warning("no template for %s (%s); forking it from the zygote", instance_id, exc)
            else:
                if launched is not None:
                    return launched
        return await self.launcher.launch(instance_id)

    def _confine(self, order: BootOrder, pid: int) -> None:
        if self._confiner is None:
            return
        # one group per worker process: a replacement never meets its predecessor's group
        name = f"{order.instance_id}-{pid}"
        try:
            confinement = self._confiner.confine(name, pid, order.cpu_ids, cores=order.config.cpus)
        except OSError as exc:  # confinement is best effort; affinity is set by the worker
            log.warning("could not confine %s: %s", order.instance_id, exc)
            return
        self._confinements[order.instance_id] = confinement

    async def release(self, instance_id: str) -> None:
        """The instance is gone: free its store holds, its template's use and its cgroup
        (removing a group waits for exiting tasks to leave it: off the event loop)."""
        if self.store is not None:
            self.store.release(instance_id)
        if self._templates is not None:
            self._templates.release(instance_id)
        confinement = self._confinements.pop(instance_id, None)
        if confinement is not None and self._confiner is not None:
            try:
                await asyncio.to_thread(self._confiner.release, confinement)
            except OSError as exc:
                log.warning("could not remove the cgroup of %s: %s", instance_id, exc)

    async def close(self) -> None:
        """Close the templates, then the launcher (running workers end with their sockets)."""
        if self._templates is not None:
            await self._templates.close()
        await self.launcher.close()

    def holder_ids(self) -> list[str]:
        """Store holders besides the instances: the templates."""
        return [] if self._templates is None else self._templates.holder_ids()

    def describe(self, instance_id: str) -> dict[str, object]:
        """Where the instance came from and how it is confined (for /system/instances)."""
        confinement = self._confinements.get(instance_id)
        template = None if self._templates is None else self._templates.template_of(instance_id)
        return {
            "confinement": None if confinement is None else confinement.describe(),
            "template": template,
        }

    def templates(self) -> list[dict[str, object]]:
        return [] if self._templates is None else self._templates.describe()

"""InstanceBooter: take one new instance from nothing to ready to serve.

Publish its weights to the tensor store (or not), launch its worker (forked from the model's
template when the store and the zygote allow one, see `templates`), confine the process to
its cores (cgroups, else affinity), load the package, time warm-up batches, and derive its
batch settings. Raises on any failure; the pool decides what a failure means.
Gateway side: never imports torch.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import msgspec

from infless.clock import Clock
from infless.config import Config
from infless.dataplane.instance import Instance
from infless.dataplane.policy import BatchSettings, powers_of_two_up_to, settle
from infless.types import FunctionSpec
from infless.weights.store import StoreError
from infless.weights.stored import StoredTensor
from infless.workers import protocol as p
from infless.workers.forkclient import ZygoteError
from infless.workers.handle import ProcessWorkerHandle
from infless.workers.launcher import LaunchedWorker, WorkerLauncher
from infless.workers.templates import TemplateCache

if TYPE_CHECKING:
    from pathlib import Path

    from infless.cluster.cgroups import Confinement, CpuConfiner
    from infless.weights.store import TensorStore

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Booted:
    handle: ProcessWorkerHandle
    ready: p.Ready
    settings: BatchSettings
    spawn_ms: float


class InstanceBooter:
    def __init__(
        self,
        config: Config,
        clock: Clock,
        launcher: WorkerLauncher,
        store: TensorStore | None = None,
        confiner: CpuConfiner | None = None,
        templates: TemplateCache | None = None,
    ) -> None:
        self._config = config
        self._clock = clock
        self.launcher = launcher
        self.store = store
        self._confiner = confiner
        self.templates = templates
        self.confinements: dict[str, Confinement] = {}

    def batch_settings(
        self, spec: FunctionSpec, exec_ms_by_batch: dict[int, float], fixed_batch: int | None
    ) -> BatchSettings:
        """The instance's batching: the largest feasible b (or the planner's fixed b)."""
        batching = self._config.batching
        slack_ms = batching.slack_ms + batching.slack_fraction * spec.slo_ms
        return settle(
            exec_ms_by_batch, spec.slo_ms, spec.max_batch, slack_ms,
            batching.queue_capacity_batches, mode=batching.dispatch, batch_size=fixed_batch,
        )  # fmt: skip

    async def boot(
        self,
        spec: FunctionSpec,
        package_dir: Path,
        instance: Instance,
        on_death: Callable[[ProcessWorkerHandle], None],
        fixed_batch: int | None = None,
    ) -> Booted:
        stored = None
        if self.store is not None:
            stored = await asyncio.to_thread(
                self.store.publish, package_dir, spec.tenant, holder=instance.instance_id
            )
        launched = await self._launch(instance.instance_id, spec.tenant, package_dir, stored)
        handle = ProcessWorkerHandle(launched, on_death=on_death)
        instance.handle = handle
        self._confine(instance)
        largest = fixed_batch or spec.max_batch
        request = p.LoadModel(
            package_dir=str(package_dir),
            cpus=instance.config.cpus,
            cpu_ids=list(instance.cpu_ids),
            warmup_batch_sizes=powers_of_two_up_to(largest),
            warmup_rounds=self._config.batching.warmup_rounds,
            store_tensors=stored,
            private_weights=stored is None and self._config.store.private_weights,
        )
        ready = await handle.load(request, self._config.workers.start_timeout_s)
        settings = self.batch_settings(spec, dict(ready.exec_ms), fixed_batch)
        return Booted(handle, ready, settings, launched.spawn_ms)

    async def _launch(
        self, instance_id: str, tenant: str, package_dir: Path, stored: list[StoredTensor] | None
    ) -> LaunchedWorker:
        """Fork from the model's template when there can be one, else from the launcher."""
        if self.templates is not None and stored is not None:
            try:
                launched = await self.templates.launch(
                    instance_id, tenant, str(package_dir), stored
                )
            except (ZygoteError, StoreError, OSError) as exc:
                log.warning("no template for %s (%s); forking it from the zygote", instance_id, exc)
            else:
                if launched is not None:
                    return launched
        return await self.launcher.launch(instance_id)

    def _confine(self, instance: Instance) -> None:
        if self._confiner is None:
            return
        try:
            confinement = self._confiner.confine(
                instance.instance_id, instance.pid, instance.cpu_ids, cores=instance.config.cpus
            )
        except OSError as exc:  # confinement is best effort; affinity is set by the worker
            log.warning("could not confine %s: %s", instance.instance_id, exc)
            return
        self.confinements[instance.instance_id] = confinement

    def release(self, instance_id: str) -> None:
        """The instance is gone: free its store holds, its template's use and its cgroup."""
        if self.store is not None:
            self.store.release(instance_id)
        if self.templates is not None:
            self.templates.release(instance_id)
        confinement = self.confinements.pop(instance_id, None)
        if confinement is not None and self._confiner is not None:
            try:
                self._confiner.release(confinement)
            except OSError as exc:
                log.warning("could not remove the cgroup of %s: %s", instance_id, exc)

    async def close(self) -> None:
        """Close the templates, then the launcher (running workers end with their sockets)."""
        if self.templates is not None:
            await self.templates.close()
        await self.launcher.close()

    def holder_ids(self) -> list[str]:
        """Store holders besides the instances: the templates."""
        return [] if self.templates is None else self.templates.holder_ids()

    def template_of(self, instance_id: str) -> str | None:
        return None if self.templates is None else self.templates.template_of(instance_id)

    def describe(self, instance_id: str) -> dict[str, object] | None:
        confinement = self.confinements.get(instance_id)
        return None if confinement is None else confinement.describe()

    def start_breakdown(self, booted: Booted) -> p.StartBreakdown:
        return msgspec.structs.replace(booted.ready.start, spawn_ms=booted.spawn_ms)

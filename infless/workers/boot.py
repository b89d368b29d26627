"""`ProcessStarter`: the innermost starter of this machine's chain (`workers.starting`), the
one that makes worker processes.

A start takes four steps:
1. publish the weights to the tensor store (or not);
2. launch the worker, forked from the model's template when the store and the zygote allow
   one (`templates`), its stdout and stderr piped to the function's logs (`output`);
3. confine it to its cores (cgroups, else affinity) and to its memory limit
   (`cluster.memory`; no limit is never a fallback);
4. load the package with the function's environment and secrets (the request: `requests`).

It says what it cannot give workers here (`runtime_support`: memory limits, secrets) and
why a worker died when it knows (`death_cause`: killed for memory). It keeps no idle
workers: `retire` stops them. The transforming starter around it keeps some, and asks it to
`transform` one. The test double `tests/support/inprocess.py` runs a callable instead.
Gateway side: never imports torch.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import msgspec

from infless.cluster.memory import MemoryLimiter
from infless.transform.records import PlanStep, StartPath
from infless.types import WorkerRuntime
from infless.weights.gpu_tier import SharedModel
from infless.weights.store import StoreError
from infless.weights.stored import StoredTensor
from infless.workers import protocol as p
from infless.workers.confinement import Confinements
from infless.workers.forkclient import ZygoteError
from infless.workers.handle import ProcessWorkerHandle, WorkerHandle, WorkerStartFailed
from infless.workers.isolation import probe_secrets
from infless.workers.launcher import LaunchedWorker, SubprocessLauncher, WorkerLauncher
from infless.workers.output import Label, OutputPumps, Sink
from infless.workers.requests import StartSettings, WorkerRequests
from infless.workers.starting import (
    Booted,
    BootOrder,
    Retiring,
    RuntimeSupport,
    StarterDefaults,
)
from infless.workers.status import Facts, TemplateView, WorkerView
from infless.workers.templates import TemplateCache

if TYPE_CHECKING:
    from pathlib import Path

    from infless.cluster.cgroups import CpuConfiner
    from infless.cluster.pids import PidsLimiter
    from infless.tenancy.sandboxes import TenantSandboxes
    from infless.weights.store import TensorStore

log = logging.getLogger(__name__)


class ProcessStarter(StarterDefaults):
    def __init__(
        self,
        settings: StartSettings,
        launcher: WorkerLauncher,
        store: TensorStore | None = None,
        confiner: CpuConfiner | None = None,
        templates: TemplateCache | None = None,
        *,
        memory: MemoryLimiter | None = None,
        secrets: Callable[[str], bytes] | None = None,
        output: Sink | None = None,
        sandboxes: TenantSandboxes | None = None,
        pids: PidsLimiter | None = None,
    ) -> None:
        self.requests = WorkerRequests(settings, sandboxes)
        self.launcher = launcher
        self.store = store
        self._templates = templates
        self._memory = memory
        self._secret_value = secrets
        self._pumps = None if output is None else OutputPumps(output)
        self.sandboxes = sandboxes
        limits = (lambda: None) if sandboxes is None else sandboxes.limits
        self.cgroups = Confinements(confiner, memory, pids, limits)
        self._labels: dict[str, Label] = {}  # whose lines each worker's output is
        self._secrets_probe: asyncio.Task[str | None] | None = None
        self._closing: set[asyncio.Task[None]] = set()
        if templates is not None:
            templates.on_fork = self.cgroups.confine_template
            templates.on_stop = self._release_template

    async def start(self) -> None:
        """Prepare the launcher (the zygote imports torch once, here, not on first deploy)."""
        await self.launcher.start()

    async def boot(self, order: BootOrder) -> Booted:
        secrets = self.secrets_of(order.runtime)  # before anything starts: one may be gone
        stored = await self.publish(order)
        launched = await self._launch(order, stored)
        handle = await self._handle(launched, order.instance_id, order.function, order.instance)
        try:
            self.adopt(order, handle)
        except BaseException:
            handle.kill()
            launched.sock.close()
            raise
        request = self.load_request(order, stored, secrets)
        if request.sandbox is not None and self._templates is not None:
            inherited = self._templates.sandbox_of(order.instance_id)  # what it runs in
            request = msgspec.structs.replace(request, sandbox=inherited or request.sandbox)
        ready = await self.load(order, handle, request)
        start = msgspec.structs.replace(ready.start, spawn_ms=launched.spawn_ms)
        return Booted(handle, ready, start)

    # -- the steps of a start, for the starters layered around this one -------------------
    async def publish(self, order: BootOrder) -> list[StoredTensor] | None:
        """The instance's weights in the store, held by it (None: no store, or a program
        package that carries its own)."""
        if self.store is None or not order.shared_weights:
            return None
        return await asyncio.to_thread(
            self.store.publish, order.package_dir, order.tenant, holder=order.instance_id
        )

    async def launch(
        self, worker_id: str, function: str = "", instance: str = ""
    ) -> ProcessWorkerHandle:
        """A new worker process with no model yet (from the zygote, else fresh), its output
        labelled `function`/`instance`; no cores assigned (`adopt` confines it)."""
        launched = await self.launcher.launch(worker_id, self._pumps is not None)
        return await self._handle(launched, worker_id, function, instance)

    async def _handle(
        self, launched: LaunchedWorker, worker_id: str, function: str, instance: str
    ) -> ProcessWorkerHandle:
        if launched.output is not None and self._pumps is not None:
            self._labels[worker_id] = await self._pumps.start(
                launched.output, function, instance or worker_id
            )
        return ProcessWorkerHandle(launched)

    def deployed(self, package_dir: Path, tenant: str, plain_module: bool) -> None:
        """A function of `tenant` runs `package_dir`: its sandboxed workers will see it."""
        if self.sandboxes is not None:
            self.sandboxes.deployed(package_dir, tenant)

    def adopt(self, order: BootOrder, handle: ProcessWorkerHandle, previous_id: str = "") -> None:
        """`handle`'s worker now serves `order`'s instance: confined to its cores (and
        memory limit), its death reported to the instance, its output in the function's
        logs (`previous_id`: the id it had while kept warm)."""
        self.cgroups.confine(order, handle.pid)
        handle.rebind_death(order.on_death)
        self.relabel(
            previous_id or order.instance_id,
            order.instance_id,
            order.function,
            order.instance or order.instance_id,
        )

    def relabel(self, old_id: str, new_id: str, function: str, instance: str) -> None:
        """Whose lines a worker's output is from now on (it serves someone else)."""
        label = self._labels.pop(old_id, None)
        if label is not None:
            label.function, label.instance = function, instance
            self._labels[new_id] = label

    def load_request(
        self,
        order: BootOrder,
        stored: list[StoredTensor] | None,
        secrets: dict[str, bytes] | None,
        *,
        gpu: p.GpuPlacement | None = None,
        gpu_weights: SharedModel | None = None,
    ) -> p.LoadModel:
        """The worker's `LoadModel` (`requests`)."""
        return self.requests.load(order, stored, secrets, gpu=gpu, gpu_weights=gpu_weights)

    def sandbox_of(self, order: BootOrder, *, gpu: bool = False) -> p.Sandbox | None:
        """The sandbox of `order`'s worker (None: isolation is not active)."""
        return self.requests.sandbox_of(order, gpu=gpu)

    def may_load(self, handle: WorkerHandle, order: BootOrder) -> bool:
        """Whether a kept worker can load `order`'s package: a sandboxed worker sees only
        its tenant's packages of when it entered, and mounts no more secrets."""
        sandboxes, pid = self.sandboxes, getattr(handle, "pid", None)
        if sandboxes is None or not isinstance(pid, int) or not sandboxes.sandboxed(pid):
            return True
        return sandboxes.sees(pid, order.package_dir) and not order.runtime.secrets

    async def load(self, order: BootOrder, handle: WorkerHandle, request: p.LoadModel) -> p.Ready:
        """Have the worker load its model; killed (with the reason when the kernel killed
        it for its memory limit) when it cannot."""
        if request.sandbox is not None and self.sandboxes is not None:
            self.sandboxes.record(handle.pid, request.sandbox)
        try:
            return await handle.load(request, self.requests.settings.start_timeout_s)
        except BaseException as exc:
            if isinstance(handle, ProcessWorkerHandle):
                handle.kill()
            cause = self.death_cause(order.instance_id)
            if cause is not None and isinstance(exc, Exception):
                raise WorkerStartFailed(f"{cause} while loading its model") from exc
            raise

    # -- transformation (Optimus): an idle worker becomes another function's instance ------
    def normal_path(self, order: BootOrder) -> StartPath:
        """How `boot` would start this instance: from the model's template when one runs,
        else from the zygote, else as a fresh process."""
        if (
            self._templates is not None
            and self.store is not None
            and order.shared_weights
            and not order.runtime.secrets
            and self._templates.has_template(order.tenant, self.requests.package(order))
        ):
            return StartPath.TEMPLATE
        return (
            StartPath.FRESH if isinstance(self.launcher, SubprocessLauncher) else StartPath.ZYGOTE
        )

    def parked(self, instance_id: str) -> None:
        """The instance's worker is kept idle: it no longer counts as its model's instance
        (a model left without instances closes its template)."""
        if self._templates is not None:
            self._templates.release(instance_id)

    def transformable(self, order: BootOrder) -> bool:
        """Whether this instance may come from (or become) a transformed worker: a plain
        module with stored weights, no secrets, no memory limit (its worker's cgroups stay
        simple)."""
        runtime = order.runtime
        return (
            self.store is not None
            and order.shared_weights
            and order.plain_module
            and not runtime.secrets
            and runtime.memory_limit_bytes is None
        )

    async def transform(
        self,
        order: BootOrder,
        donor_id: str,
        handle: WorkerHandle,
        steps: list[PlanStep],
        structure_json: str,
    ) -> Booted:
        """Turn the idle worker `donor_id` into `order`'s instance by `steps`: publish the
        destination's tensors (held by the new instance), move the worker to the new
        instance's cores, have it transform its model, then let go of what the donor held.
        Raises (and kills the worker) when anything fails: it must not serve again."""
        if not isinstance(handle, ProcessWorkerHandle) or self.store is None:
            raise WorkerStartFailed("only a process worker with the store can be transformed")
        try:
            stored = await asyncio.to_thread(
                self.store.publish, order.package_dir, order.tenant, holder=order.instance_id
            )
            self.cgroups.confine(order, handle.pid)
            handle.rebind_death(order.on_death)
            request = self.requests.transform(order, stored, steps, structure_json)
            ready = await handle.transform(request, self.requests.settings.start_timeout_s)
            # its output joins the new function's logs
            self.relabel(
                donor_id, order.instance_id, order.function, order.instance or order.instance_id
            )
        except BaseException:
            handle.kill()
            await self.cgroups.release(order.instance_id)  # the normal start makes its own
            raise
        finally:
            await self.release(donor_id)  # its store holds, template use and old cgroup
        return Booted(handle, ready, ready.start)

    def secrets_of(self, runtime: WorkerRuntime) -> dict[str, bytes] | None:
        """The runtime's secret values, read now (a missing one fails the start)."""
        if not runtime.secrets:
            return None
        if self._secret_value is None:
            raise WorkerStartFailed("secrets: this starter has no secret store")
        return {name: self._secret_value(name) for name in runtime.secrets}

    async def _launch(self, order: BootOrder, stored: list[StoredTensor] | None) -> LaunchedWorker:
        """Fork from the model's template when there can be one, else from the launcher."""
        capture = self._pumps is not None
        runtime = order.runtime
        if self._templates is not None and stored is not None and not runtime.secrets:
            try:
                launched = await self._templates.launch(
                    order.instance_id,
                    order.tenant,
                    self.requests.package(order),
                    stored,
                    runtime.env,
                    capture,
                    self.sandbox_of(order),
                )
            except (ZygoteError, StoreError, OSError) as exc:
                log.warning(
                    "no template for %s (%s); forking it from the zygote", order.instance_id, exc
                )
            else:
                if launched is not None:
                    return launched
        return await self.launcher.launch(order.instance_id, capture)

    def death_cause(self, instance_id: str) -> str | None:
        """ "killed: out of memory (limit …)" when the kernel killed the worker for its limit."""
        return self.cgroups.death_cause(instance_id)

    async def runtime_support(self, runtime: WorkerRuntime) -> RuntimeSupport:
        """What of `runtime` this server cannot give workers (secrets: probed once)."""
        memory = None
        if runtime.memory_limit_bytes is not None:
            memory = "workers.cgroups is off" if self._memory is None else self._memory.unavailable
        secrets = None
        if runtime.secrets:
            if self._secret_value is None:
                secrets = "this gateway has no secret store"
            else:
                if self._secrets_probe is None or self._secrets_probe.cancelled():
                    self._secrets_probe = asyncio.create_task(probe_secrets())
                secrets = await asyncio.shield(self._secrets_probe)
        return RuntimeSupport(memory, secrets)

    async def retire(self, retiring: Retiring) -> bool:
        """Stop the worker, and what its package left behind in its pids group (`cgroups`)."""
        await self.stop_kept(retiring.order.instance_id, retiring.handle, retiring.timeout_s)
        return False

    async def stop_kept(self, worker_id: str, handle: WorkerHandle, timeout_s: float) -> None:
        await self.cgroups.stop(worker_id, handle, timeout_s)

    async def release(self, instance_id: str) -> None:
        """The instance is gone: free its store holds, its template's use and its cgroups
        (removing a group waits for exiting tasks to leave it: off the event loop)."""
        self._labels.pop(instance_id, None)
        if self.store is not None:
            self.store.release(instance_id)
        if self._templates is not None:
            self._templates.release(instance_id)
        await self.cgroups.release(instance_id)

    def _release_template(self, template_id: str) -> None:
        task = asyncio.get_running_loop().create_task(self.cgroups.release(template_id))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        """Close the templates, then the launcher (running workers end with their sockets),
        then read what workers wrote last."""
        if self._templates is not None:
            await self._templates.close()
        await self.launcher.close()
        if self._pumps is not None:
            await self._pumps.close()
        await asyncio.gather(*self._closing, return_exceptions=True)
        self.cgroups.close()

    def holder_ids(self) -> list[str]:
        """Store holders besides the instances: the templates."""
        return [] if self._templates is None else self._templates.holder_ids()

    def describe(self, instance_id: str) -> WorkerView:
        """Where the instance came from and how it is confined (for /system/instances)."""
        template = None if self._templates is None else self._templates.template_of(instance_id)
        confined = self.cgroups.describe(instance_id)
        return WorkerView(
            confinement=_facts(confined.get("confinement")),
            memory_limit=_facts(confined.get("memoryLimit")),
            pids_limit=_facts(confined.get("pidsLimit")),
            template=template,
        )

    def templates(self) -> list[TemplateView]:
        return [] if self._templates is None else self._templates.describe()


def _facts(described: object) -> Facts | None:
    """A confinement's own description (a dict), or None where there is none."""
    return described if isinstance(described, dict) else None

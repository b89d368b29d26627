"""WorkerPool: the instances of every deployed function on this server, kept at their targets.

Two ways to decide how many instances run. Without an autoscaler (or for a function pinned
by a manual `scale`), `desired` counts and `reconcile` starts or drains uniform instances to
match. With one, the autoscaler calls `start_instance(config)` / `stop_instance(id)` with
non-uniform <b, c, g>, and `reconcile` only starts an instance for a cold start. Either way,
`InstanceBooter` brings instances up, a worker that dies is replaced (or left to the
autoscaler) and its requests retried. Gateway side: never imports torch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from infless.clock import Clock
from infless.cluster.cpus import CpuAllocator
from infless.coldstart.activity import FunctionActivity
from infless.config import Config
from infless.dataplane.instance import Instance, InstanceState
from infless.dataplane.request import Pending
from infless.dataplane.router import FunctionRouter
from infless.errors import FunctionNotFound, WorkerUnavailable
from infless.models.package import PackageManifest
from infless.types import FunctionSpec, InstanceConfig, TensorSpec
from infless.workers.boot import InstanceBooter
from infless.workers.handle import ProcessWorkerHandle
from infless.workers.launcher import WorkerLauncher

log = logging.getLogger(__name__)


@dataclass(eq=False)
class DeployedFunction:
    spec: FunctionSpec
    package_dir: Path
    manifest: PackageManifest
    router: FunctionRouter
    desired: int
    input_specs: tuple[TensorSpec, ...] = ()
    activity: FunctionActivity = field(default_factory=FunctionActivity)
    last_start_duration_s: float = 0.0
    invocations: int = 0
    start_failures: int = 0
    last_error: str | None = None
    boots: set[asyncio.Task[None]] = field(default_factory=set)
    pinned: bool = False  # a manual scale fixed the count: the autoscaler leaves it alone
    keep_warm: bool = True  # the cold-start policy wants at least one instance
    restore_to: int = 1  # the count to come back to after a release to zero


class WorkerPool:
    def __init__(
        self,
        config: Config,
        clock: Clock,
        launcher: WorkerLauncher,
        allocator: CpuAllocator,
        on_instance_change: Callable[[DeployedFunction], None] | None = None,
        booter: InstanceBooter | None = None,
        autoscaled: bool = False,
    ) -> None:
        self._config = config
        self._clock = clock
        self._allocator = allocator
        self._on_change = on_instance_change
        self.booter = booter or InstanceBooter(config, clock, launcher)
        self.autoscaled = autoscaled
        self.functions: dict[str, DeployedFunction] = {}
        self._stopping = False
        self._background: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        """Prepare the launcher (the zygote imports torch once, here, not on first deploy)."""
        await self.booter.launcher.start()

    # -- desired state -----------------------------------------------------------------
    def deploy(self, spec: FunctionSpec, package_dir: Path, manifest: PackageManifest) -> None:
        waiting_capacity = max(64, spec.max_batch * self._config.batching.queue_capacity_batches)
        router = FunctionRouter(spec.name, self._clock, waiting_capacity, self._cold_start)
        function = DeployedFunction(
            spec, package_dir, manifest, router, spec.instances, manifest.input_specs
        )
        function.activity.idle_since_s = self._clock.now()
        self.functions[spec.name] = function
        self.reconcile(spec.name)

    async def redeploy(
        self, spec: FunctionSpec, package_dir: Path, manifest: PackageManifest
    ) -> None:
        """Replace a function's definition: new instances come up, the old ones drain."""
        old = self.functions.get(spec.name)
        if old is None:
            self.deploy(spec, package_dir, manifest)
            return
        if old.package_dir == package_dir and _same_serving(old.spec, spec):
            old.spec = spec
            self.scale(spec.name, spec.instances)
            return
        await self.remove(spec.name)
        self.deploy(spec, package_dir, manifest)

    def scale(self, name: str, instances: int, *, pin: bool = False) -> None:
        """Set the instance count; `pin` (a person asked) takes it from the autoscaler."""
        function = self.get(name)
        function.desired = max(0, instances)
        function.pinned = function.pinned or pin
        function.spec = replace(function.spec, instances=function.desired)
        self.reconcile(name)

    def set_warm(self, name: str, warm: bool) -> None:
        """The cold-start policy's verdict: keep (at least) one instance, or none."""
        function = self.get(name)
        function.keep_warm = warm
        if self.is_autoscaled(function):
            return  # the autoscaler reads keep_warm on its next tick
        if warm:
            self.scale(name, max(1, function.restore_to))
        else:
            function.restore_to = max(1, function.desired)
            self.scale(name, 0)

    def is_autoscaled(self, function: DeployedFunction) -> bool:
        return self.autoscaled and not function.pinned

    def start_instance(self, name: str, config: InstanceConfig) -> str:
        """Start one instance with the autoscaler's <b, c, g>; returns its id."""
        return self._spawn(self.get(name), config).instance_id

    def stop_instance(self, instance_id: str) -> None:
        """Drain one instance, then stop it (its queued requests are answered first)."""
        for function in self.functions.values():
            for instance in function.router.instances:
                if instance.instance_id == instance_id and instance.state is InstanceState.READY:
                    self._background_task(self._drain(function, instance))
                    return

    async def remove(self, name: str) -> None:
        function = self.functions.pop(name, None)
        if function is None:
            raise FunctionNotFound(f"function {name!r} is not deployed")
        for task in list(function.boots):
            task.cancel()
        function.router.fail_all(WorkerUnavailable(f"function {name!r} was removed"))
        await asyncio.gather(
            *(self._drain(function, i) for i in list(function.router.instances)),
            return_exceptions=True,
        )

    def get(self, name: str) -> DeployedFunction:
        function = self.functions.get(name)
        if function is None:
            raise FunctionNotFound(
                f"function {name!r} is not deployed; GET /system/functions lists what is"
            )
        return function

    # -- reconciliation ----------------------------------------------------------------
    def _cold_start(self, name: str) -> None:
        function = self.functions.get(name)
        if function is not None:
            function.desired = max(function.desired, 1)
            self.reconcile(name)

    def reconcile(self, name: str) -> None:
        function = self.functions.get(name)
        if function is None or self._stopping:
            return
        router = function.router
        live = [
            i for i in router.instances if i.state in (InstanceState.STARTING, InstanceState.READY)
        ]
        if self.is_autoscaled(function):
            # The autoscaler plans from measurements: the first instance (uniform, measuring
            # every batch size) comes from here, as does a cold start, which cannot wait.
            wanted = router.waiting or (function.keep_warm and function.spec.min_instances > 0)
            if wanted and not live:
                self._spawn(function)
            return
        target = max(function.desired, 1 if router.waiting else 0)
        for _ in range(target - len(live)):
            self._spawn(function)
        surplus = len(live) - target
        if surplus > 0:
            ready = [i for i in live if i.state is InstanceState.READY]
            for instance in sorted(ready, key=lambda i: i.queue_length)[:surplus]:
                self._background_task(self._drain(function, instance))

    def _spawn(self, function: DeployedFunction, config: InstanceConfig | None = None) -> Instance:
        spec = function.spec
        cores = self._allocator.assign(config.cpus if config else spec.cpus_per_instance)
        instance = Instance(
            instance_id=f"{spec.name}-{secrets.token_hex(3)}",
            function_name=spec.name,
            config=config or InstanceConfig(batch_size=spec.max_batch, cpus=len(cores)),
            cpu_ids=cores,
            clock=self._clock,
            input_specs=function.input_specs,
            on_orphans=lambda inst, orphans: self._orphaned(function, inst, orphans),
        )
        function.router.add(instance)
        fixed_batch = None if config is None else config.batch_size
        task = asyncio.create_task(
            self._boot(function, instance, fixed_batch), name=f"boot-{instance.instance_id}"
        )
        function.boots.add(task)
        task.add_done_callback(function.boots.discard)
        return instance

    async def _boot(
        self, function: DeployedFunction, instance: Instance, fixed_batch: int | None
    ) -> None:
        spec = function.spec
        try:
            booted = await self.booter.boot(
                spec,
                function.package_dir,
                instance,
                on_death=lambda _: self._died(function, instance),
                fixed_batch=fixed_batch,
            )
        except asyncio.CancelledError:
            await self._discard(function, instance)
            raise
        except Exception as exc:  # any start failure is reported and retried with backoff
            self._boot_failed(function, instance, f"{type(exc).__name__}: {exc}")
            return
        handle, ready, settings = booted.handle, booted.ready, booted.settings
        batch_size = settings.batch_size
        instance.become_ready(
            handle,
            settings,
            ready,
            retune=lambda exec_ms: self.booter.batch_settings(spec, exec_ms, batch_size),
        )
        instance.start_breakdown = self.booter.start_breakdown(booted)
        function.start_failures = 0
        function.last_start_duration_s = self._clock.now() - instance.started_at_s
        log.info(
            "instance %s ready: pid %d, batch %d, exec %.1f ms, cores %s",
            instance.instance_id,
            handle.pid,
            settings.batch_size,
            settings.exec_ms,
            instance.cpu_ids,
        )
        function.router.instance_ready(instance)
        self._changed(function)
        self.reconcile(spec.name)

    def _forget(self, instance: Instance) -> None:
        """An instance is gone for good: free its cores, store holds and cgroup."""
        self._allocator.release(instance.cpu_ids)
        self.booter.release(instance.instance_id)

    def instance_ids(self) -> list[str]:
        """Every instance that may hold store tensors (starting, ready or draining)."""
        return [i.instance_id for i in self.all_instances() if i.state is not InstanceState.DEAD]

    def _boot_failed(self, function: DeployedFunction, instance: Instance, error: str) -> None:
        log.error("instance %s failed to start: %s", instance.instance_id, error)
        instance.state = InstanceState.DEAD
        instance.error = error
        function.last_error = error
        function.start_failures += 1
        function.router.remove(instance)
        self._forget(instance)
        if instance.handle is not None and isinstance(instance.handle, ProcessWorkerHandle):
            instance.handle.kill()
        function.router.start_failed(error)
        delay_s = min(30.0, 0.5 * 2**function.start_failures)
        self._background_task(self._retry_later(function.spec.name, delay_s))

    async def _retry_later(self, name: str, delay_s: float) -> None:
        await self._clock.sleep_until(self._clock.now() + delay_s)
        self.reconcile(name)

    async def _discard(self, function: DeployedFunction, instance: Instance) -> None:
        instance.state = InstanceState.DEAD
        function.router.remove(instance)
        self._forget(instance)
        if instance.handle is not None:
            await instance.handle.stop(2.0)

    def _died(self, function: DeployedFunction, instance: Instance) -> None:
        if instance.state in (InstanceState.DRAINING, InstanceState.DEAD):
            return
        code = getattr(instance.handle, "exit_code", None)
        log.warning(
            "instance %s: worker pid %d died (exit %s)", instance.instance_id, instance.pid, code
        )
        instance.mark_dead(f"worker exited (code {code})")

    def _orphaned(
        self, function: DeployedFunction, instance: Instance, orphans: list[Pending]
    ) -> None:
        function.router.remove(instance)
        self._forget(instance)
        function.router.adopt_orphans(orphans)
        self._changed(function)
        self.reconcile(function.spec.name)

    async def _drain(self, function: DeployedFunction, instance: Instance) -> None:
        try:
            await instance.drain(timeout_s=max(5.0, function.spec.slo_ms / 1000.0 * 10))
        finally:
            function.router.remove(instance)
            self._forget(instance)
            self._changed(function)

    def _changed(self, function: DeployedFunction) -> None:
        if self._on_change is not None:
            self._on_change(function)

    def _background_task(self, coro: object) -> None:
        task = asyncio.ensure_future(coro)  # type: ignore[call-overload]
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # -- shutdown ------------------------------------------------------------------------
    async def stop(self) -> None:
        """Drain every instance (queued requests are answered), then stop the launcher."""
        self._stopping = True
        for task in list(self._background):
            task.cancel()
        names = list(self.functions)
        for name in names:
            with contextlib.suppress(FunctionNotFound):
                await self.remove(name)
        await self.booter.close()

    def all_instances(self) -> list[Instance]:
        return [i for f in self.functions.values() for i in f.router.instances]


def _same_serving(old: FunctionSpec, new: FunctionSpec) -> bool:
    return (
        old.image == new.image
        and old.slo_ms == new.slo_ms
        and old.max_batch == new.max_batch
        and old.cpus_per_instance == new.cpus_per_instance
        and old.tenant == new.tenant
    )

"""WorkerPool: the reconciler. Running instances follow each function's desired state.

A function's `desired` changes only through `change(name, transition)` (`control.desired`:
a person's scale, the autoscaler's plan, the cold-start release and wake, a request that
found nothing running). After every change and instance event, `_reconcile` starts what is
missing (through the starter of the server the entry names: this machine's chain of
starters, a node agent's over Ray, in-process in tests), drains what is no longer wanted
(its starter may keep the worker warm: `retire`) and replaces a worker that died (its
requests are retried, `dataplane.router`). Servers come and go (`add_server`,
`remove_server`: a lost node's entries move to the servers that remain). The instances
themselves are `control.instances`' to create and move between states. The pool decides
nothing itself; it is the scaling port's target (`snapshot`, `apply`), and it calls
starters only through their protocol (`workers.starting`). Gateway side: never imports
torch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Callable, Coroutine
from functools import partial
from pathlib import Path
from typing import Any

from infless.clock import Clock
from infless.control import desired as d
from infless.control.functions import DeployedFunction, InstanceMinter, same_serving
from infless.control.instances import InstanceRegistry
from infless.control.port import Snapshot
from infless.control.servers import Server, ServerSet
from infless.control.snapshot import LIVE, function_state
from infless.dataplane.config import BatchingConfig
from infless.dataplane.instance import Instance, InstanceState
from infless.dataplane.latency import FunctionLatency
from infless.dataplane.request import Pending
from infless.dataplane.router import FunctionRouter
from infless.errors import FunctionNotFound, WorkerUnavailable
from infless.models.package import PackageManifest
from infless.scaling.view import Action, ScalingPlan
from infless.types import FunctionSpec
from infless.workers.starting import BootOrder, Retiring

log = logging.getLogger(__name__)

Transition = Callable[[d.DesiredState, d.InstanceMint], d.DesiredState]


class WorkerPool:
    def __init__(
        self,
        clock: Clock,
        servers: list[Server],
        batching: BatchingConfig,
        *,
        autoscaled: bool = False,
        on_instance_change: Callable[[DeployedFunction], None] | None = None,
    ) -> None:
        self._clock = clock
        self.servers = ServerSet(servers)
        self._batching = batching
        self._owner = d.Owner.AUTOSCALER if autoscaled else d.Owner.MANUAL
        self._on_change = on_instance_change
        self.functions: dict[str, DeployedFunction] = {}
        self.instances = InstanceRegistry(clock, batching, self._orphaned)
        self._stopping = False
        self._background: set[asyncio.Task[Any]] = set()  # drains and releases: awaited
        self._retries: set[asyncio.Task[None]] = set()  # start retries: cancelled at stop

    async def start(self) -> None:
        await self.servers.start()

    # -- servers -------------------------------------------------------------------------
    async def add_server(self, server: Server) -> None:
        """A server joined: its starter starts, and instances waiting for a server go there."""
        await server.starter.start()
        self.servers[server.server_id] = server
        for function in list(self.functions.values()):
            self._reconcile(function)

    def remove_server(self, server_id: str, reason: str) -> None:
        """A server left (its node died): its instances are dead (their requests are retried
        on the others), and their entries move to the servers that remain."""
        server = self.servers.pop(server_id, None)
        if server is None:
            return
        log.warning("server %s left (%s): replacing its instances", server_id, reason)
        for function in list(self.functions.values()):
            for instance in list(function.router.instances):
                if instance.server_id != server_id:
                    continue
                if instance.state is InstanceState.STARTING:
                    task = function.boots.get(instance.worker_id)
                    if task is not None:
                        task.cancel()
                else:
                    instance.mark_dead(f"server {server_id} left: {reason}")
                    if instance.handle is not None:  # its connection may not close by itself
                        self._background_task(instance.handle.stop(2.0))
            self._reconcile(function)
        self._background_task(server.starter.close())

    # -- function definitions -----------------------------------------------------------
    def deploy(
        self, spec: FunctionSpec, package_dir: Path, manifest: PackageManifest
    ) -> DeployedFunction:
        waiting_capacity = max(64, spec.max_batch * self._batching.queue_capacity_batches)
        router = FunctionRouter(spec.name, self._clock, waiting_capacity, self._wake)
        latency = FunctionLatency(spec.slo_ms, self._batching.tail_quantile)
        function = DeployedFunction(
            spec, package_dir, manifest, router, d.DesiredState(self._owner), latency
        )
        function.activity.idle_since_s = self._clock.now()
        self.functions[spec.name] = function
        for server in self.servers.values():
            server.starter.deployed(package_dir, spec.tenant, manifest.format == "module")
        count = spec.instances if self._owner is d.Owner.MANUAL else min(1, spec.min_instances)
        self.change(spec.name, partial(d.initial, count=count))
        return function

    async def redeploy(
        self, spec: FunctionSpec, package_dir: Path, manifest: PackageManifest
    ) -> None:
        """Replace a function's definition: new instances come up, the old ones drain."""
        old = self.functions.get(spec.name)
        if old is None:
            self.deploy(spec, package_dir, manifest)
            return
        if old.package_dir == package_dir and same_serving(old.spec, spec):
            old.spec = spec
            if old.desired.owner is d.Owner.MANUAL:
                self.change(spec.name, partial(d.scaled, count=spec.instances))
            return
        await self.remove(spec.name)
        self.deploy(spec, package_dir, manifest)

    async def remove(self, name: str) -> None:
        function = self.functions.pop(name, None)
        if function is None:
            raise FunctionNotFound(f"function {name!r} is not deployed")
        for task in list(function.boots.values()):
            task.cancel()
        gone = "the gateway is shutting down" if self._stopping else "it was removed"
        function.router.fail_all(WorkerUnavailable(f"function {name!r}: {gone}"))
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

    # -- desired state: the one way to say what should run ------------------------------
    def change(self, name: str, transition: Transition) -> d.DesiredState:
        """Apply an owner's transition to the function's desired state, then reconcile."""
        function = self.get(name)
        function.desired = transition(function.desired, self._mint(function))
        self._reconcile(function)
        return function.desired

    def _mint(self, function: DeployedFunction) -> InstanceMinter:
        return InstanceMinter(function, self.servers.placer(function, self.functions.values()))

    def _wake(self, name: str) -> None:
        """A request waits and nothing is starting: at least one instance again."""
        if name in self.functions and not self._stopping:
            self.change(name, d.woken)

    # -- the scaling port ----------------------------------------------------------------
    def apply(self, plan: ScalingPlan) -> None:
        per_function: dict[str, list[Action]] = defaultdict(list)
        for action in plan.actions:
            per_function[action.function].append(action)
        for name, actions in per_function.items():
            if name in self.functions:
                self.change(name, partial(d.applied, actions=actions))

    def snapshot(self) -> Snapshot:
        now = self._clock.now()
        states = tuple(function_state(f, now) for f in self.functions.values())
        return Snapshot(self.servers.views(self.functions.values()), states, now)

    # -- reconciliation ------------------------------------------------------------------
    def _reconcile(self, function: DeployedFunction) -> None:
        if self._stopping or self.functions.get(function.name) is not function:
            return
        if any(w.server_id not in self.servers for w in function.desired.instances):
            if not self.servers:
                return  # nowhere to run: the entries wait for a server to join
            function.desired = d.relocated(function.desired, self._mint(function), self.servers)
        wanted = {w.instance_id: w for w in function.desired.instances}
        running = {i.instance_id: i for i in function.router.instances if i.state in LIVE}
        for instance_id, surplus in running.items():
            if instance_id not in wanted:
                self._retire(function, surplus)
        may_start = function.health.retry_at_s <= self._clock.now()
        for instance_id, entry in wanted.items():
            current = running.get(instance_id)
            if current is None:
                if may_start:
                    self._spawn(function, entry)
            elif entry.share_rps is not None and current.state is InstanceState.READY:
                self.instances.set_share(current, entry.share_rps)

    def _retire(self, function: DeployedFunction, instance: Instance) -> None:
        """No longer wanted: a starting instance is cancelled, a ready one drains."""
        if instance.state is InstanceState.STARTING:
            task = function.boots.get(instance.worker_id)
            if task is not None:
                task.cancel()
            return
        instance.stop_accepting()
        self._background_task(self._drain(function, instance))

    def _spawn(self, function: DeployedFunction, entry: d.WantedInstance) -> None:
        server = self.servers[entry.server_id]
        instance, order = self.instances.create(
            function, entry, server, on_death=lambda inst: self._died(function, inst)
        )
        function.router.add(instance)
        worker_id = instance.worker_id
        task = asyncio.create_task(
            self._boot(function, instance, entry, server, order), name=f"boot-{worker_id}"
        )
        function.boots[worker_id] = task
        task.add_done_callback(lambda _: function.boots.pop(worker_id, None))

    async def _boot(
        self,
        function: DeployedFunction,
        instance: Instance,
        entry: d.WantedInstance,
        server: Server,
        order: BootOrder,
    ) -> None:
        try:
            booted = await server.starter.boot(order)
        except asyncio.CancelledError:
            self._discard(function, instance)
            raise
        except Exception as exc:  # any start failure is reported and retried with backoff
            self._boot_failed(function, instance, f"{type(exc).__name__}: {exc}")
            return
        chosen = self.instances.ready(function, instance, booted, entry.fixed_batch)
        function.health.started(self._clock.now() - instance.started_at_s)
        log.info(
            "instance %s ready: pid %d, batch %d, exec %.1f ms, cores %s%s",
            instance.instance_id,
            instance.pid,
            chosen.batch_size,
            chosen.exec_ms,
            instance.cpu_ids,
            f", gpu {entry.gpu_index} at {entry.config.gpu_pct}%" if entry.config.gpu_pct else "",
        )
        function.router.instance_ready(instance)
        self._changed(function)
        self._reconcile(function)

    def _boot_failed(self, function: DeployedFunction, instance: Instance, error: str) -> None:
        log.error("instance %s failed to start: %s", instance.instance_id, error)
        self.instances.start_failed(instance, error)
        delay_s = function.health.failed(error, self._clock.now())
        function.router.remove(instance)
        self._forget(instance)
        function.router.start_failed(error)
        retry = asyncio.create_task(self._retry_later(function, delay_s))
        self._retries.add(retry)
        retry.add_done_callback(self._retries.discard)

    async def _retry_later(self, function: DeployedFunction, delay_s: float) -> None:
        await self._clock.sleep_until(self._clock.now() + delay_s)
        self._reconcile(function)

    def _discard(self, function: DeployedFunction, instance: Instance) -> None:
        """A start was cancelled (no longer wanted, or shutdown): the starter let go of it."""
        self.instances.start_failed(instance)
        function.router.remove(instance)
        self._forget(instance)

    def _died(self, function: DeployedFunction, instance: Instance) -> None:
        if instance.state is not InstanceState.READY:
            return  # a start that fails is the boot's to report; a drain's runner sees it
        code = getattr(instance.handle, "exit_code", None)
        server = self.servers.get(instance.server_id)
        cause = None if server is None else server.starter.death_cause(instance.worker_id)
        error = cause or f"worker exited (code {code})"
        said = cause or f"died (exit {code})"
        log.warning("instance %s: worker pid %d %s", instance.instance_id, instance.pid, said)
        function.health.last_error = f"instance {instance.instance_id}: {error}"
        instance.mark_dead(error)

    def _orphaned(
        self, function: DeployedFunction, instance: Instance, orphans: list[Pending]
    ) -> None:
        function.router.remove(instance)
        self._forget(instance)
        function.router.adopt_orphans(orphans)
        self._changed(function)
        self._reconcile(function)

    async def _drain(self, function: DeployedFunction, instance: Instance) -> None:
        """Answer what it queued, then hand its worker back to its starter, which may keep
        it warm (its store holds go with it) or stop it."""
        timeout_s = max(5.0, function.spec.slo_ms / 1000.0 * 10)
        still_deployed = not self._stopping and self.functions.get(function.name) is function
        kept = False
        try:
            await instance.drain(timeout_s=timeout_s, stop_worker=False)
            kept = await self._hand_back(instance, still_deployed, timeout_s)
        finally:
            function.router.remove(instance)
            if kept:  # the cores go back; the store holds stay with the kept worker
                if self.instances.let_go(instance.worker_id):
                    self.servers[instance.server_id].allocator.release(instance.cpu_ids)
            else:
                self._forget(instance)
            self._changed(function)

    async def _hand_back(self, instance: Instance, keep: bool, timeout_s: float) -> bool:
        handle = instance.handle
        if handle is None:
            return False
        server = self.servers.get(instance.server_id)
        order = self.instances.order(instance.worker_id)
        if server is None or order is None:  # its server left: nothing keeps it
            await handle.stop(timeout_s)
            return False
        retiring = Retiring(order, handle, instance.history, keep, timeout_s)
        return await server.starter.retire(retiring)

    def _forget(self, instance: Instance) -> None:
        """An instance is gone for good: free its cores, store holds and cgroup (once)."""
        if not self.instances.let_go(instance.worker_id):
            return
        server = self.servers.get(instance.server_id)
        if server is not None:  # a server that left took its cores and workers with it
            server.allocator.release(instance.cpu_ids)
            self._background_task(server.starter.release(instance.worker_id))

    def _changed(self, function: DeployedFunction) -> None:
        if self._on_change is not None:
            self._on_change(function)

    def _background_task(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # -- reading -------------------------------------------------------------------------
    def all_instances(self) -> list[Instance]:
        return [i for f in self.functions.values() for i in f.router.instances]

    def holder_ids(self) -> list[str]:
        """Every worker that may hold store tensors (starting, ready, draining, or kept
        warm by a starter: templates, idle and standby workers)."""
        return [*self.instances.holding(), *self.servers.starter_holders()]

    # -- shutdown ------------------------------------------------------------------------
    async def stop(self) -> None:
        """Drain every instance (queued requests are answered), then stop the starter."""
        self._stopping = True
        for name in list(self.functions):
            with contextlib.suppress(FunctionNotFound):
                await self.remove(name)
        for task in list(self._retries):
            task.cancel()
        await asyncio.gather(*self._background, *self._retries, return_exceptions=True)
        await self.servers.close()

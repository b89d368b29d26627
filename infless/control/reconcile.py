"""`Reconciler`: the pool's reconcile loop, the one place that acts on events.

Each event (`control.events`) is handled here, one at a time, in the order it was posted
(`control.loop` runs the consumer). Handlers never await: a start or a drain runs as its
own task and posts its completion back (`BootFinished`, `BootFailed`, `BootCancelled`,
`DrainFinished`). `reconcile` compares a function's desired state with its running
instances: it starts what is missing, drains what is no longer wanted, and sets the
dispatch shares the plan gave. Decisions are pure functions elsewhere
(`control.desired`, `InstanceRegistry.retuned`). The public surface (deploy, change,
servers, shutdown) is the pool's (`control.pool`). Gateway side: never imports torch.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Mapping
from typing import Any

from infless.clock import Clock
from infless.control import desired as d
from infless.control import events as ev
from infless.control.functions import DeployedFunction, InstanceMinter
from infless.control.instances import InstanceRegistry
from infless.control.servers import Server, ServerSet
from infless.control.snapshot import LIVE
from infless.dataplane.events import InstanceLost, RetuneDue, WakeRequested
from infless.dataplane.instance import Instance, InstanceState
from infless.dataplane.request import Pending
from infless.workers.starting import BootOrder, InstanceStarter, Retiring

log = logging.getLogger(__name__)


class Reconciler:
    """Acts on each event in turn; owns the start, drain and retry tasks it launches."""

    def __init__(
        self,
        *,
        clock: Clock,
        functions: Mapping[str, DeployedFunction],
        servers: ServerSet,
        instances: InstanceRegistry,
        post: ev.Post,
        on_change: ev.Changed | None = None,
    ) -> None:
        self._clock = clock
        self._functions = functions
        self._servers = servers
        self._instances = instances
        self._post = post
        self._on_change = on_change
        self.stopping = False
        self._background: set[asyncio.Task[Any]] = set()  # drains and releases: awaited
        self._retries: set[asyncio.Task[None]] = set()  # start retries: cancelled at stop

    def mint(self, function: DeployedFunction) -> InstanceMinter:
        return InstanceMinter(function, self._servers.placer(function, self._functions.values()))

    def deployed(self, function: DeployedFunction) -> bool:
        return not self.stopping and self._functions.get(function.name) is function

    def handle(self, event: ev.Event) -> None:
        """The loop's one entry point: act on `event`."""
        match event:
            case ev.DesiredChanged(function=function):
                self._reconcile(function)
            case ev.ServerLeft(server=server, reason=reason):
                self._server_left(server, reason)
            case WakeRequested(function=name):
                self._wake(name)
            case ev.BootFinished():
                self._ready(event)
            case ev.BootFailed(function=function, instance=instance, error=error):
                self._boot_failed(function, instance, error)
            case ev.BootCancelled(function=function, instance=instance):
                self._discard(function, instance)
            case ev.WorkerExited(function=function, instance=instance):
                self._died(function, instance)
            case ev.DrainFinished(function=function, instance=instance, kept=kept):
                self._drained(function, instance, kept)
            case ev.InstanceEvent(function=function, event=InstanceLost() as lost):
                self._orphaned(function, lost.instance, lost.orphans)
            case ev.InstanceEvent(function=function, event=RetuneDue() as due):
                self._retune(function, due)

    def _reconcile(self, function: DeployedFunction) -> None:
        if self.stopping or self._functions.get(function.name) is not function:
            return
        if any(w.server_id not in self._servers for w in function.desired.instances):
            if not self._servers:
                return  # nowhere to run: the entries wait for a server to join
            function.desired = d.relocated(function.desired, self.mint(function), self._servers)
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
                self._instances.set_share(current, entry.share_rps)

    def _server_left(self, server: Server, reason: str) -> None:
        """Its instances are dead (their requests are retried on the others) and their
        entries move to the servers that remain."""
        server_id = server.server_id
        if self._servers.get(server_id) is not server:
            return  # gone already, or a new server of that id joined since
        del self._servers[server_id]
        log.warning("server %s left (%s): replacing its instances", server_id, reason)
        for function in list(self._functions.values()):
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
                        self.background(instance.handle.stop(2.0))
            self._reconcile(function)
        self.background(server.starter.close())

    def _wake(self, name: str) -> None:
        """A request waits and nothing is starting: at least one instance again."""
        function = self._functions.get(name)
        if function is None or self.stopping:
            return
        function.desired = d.woken(function.desired, self.mint(function))
        self._reconcile(function)

    def _retire(self, function: DeployedFunction, instance: Instance) -> None:
        """No longer wanted: a starting instance is cancelled, a ready one drains."""
        if instance.state is InstanceState.STARTING:
            task = function.boots.get(instance.worker_id)
            if task is not None:
                task.cancel()
            return
        instance.stop_accepting()
        server = self._servers.get(instance.server_id)
        if server is not None:  # a start in this pass may take its cores (`CpuAllocator`)
            server.allocator.retire(instance.worker_id)
        self.background(self.drain(function, instance))

    def _spawn(self, function: DeployedFunction, entry: d.WantedInstance) -> None:
        server = self._servers[entry.server_id]
        instance, order = self._instances.create(
            function,
            entry,
            server,
            events=ev.FunctionEvents(self._post, function),
            on_death=lambda inst: self._post(ev.WorkerExited(function=function, instance=inst)),
        )
        function.router.add(instance)
        worker_id = instance.worker_id
        task = asyncio.create_task(
            self._boot(function, instance, entry, server.starter, order),
            name=f"boot-{worker_id}",
        )
        function.boots[worker_id] = task
        task.add_done_callback(lambda _: function.boots.pop(worker_id, None))

    async def _boot(
        self,
        function: DeployedFunction,
        instance: Instance,
        entry: d.WantedInstance,
        starter: InstanceStarter,
        order: BootOrder,
    ) -> None:
        """The start's task: await the starter, post what came of it."""
        try:
            booted = await starter.boot(order)
        except asyncio.CancelledError:
            self._post(ev.BootCancelled(function=function, instance=instance))
            raise
        except Exception as exc:  # any start failure is reported and retried with backoff
            error = f"{type(exc).__name__}: {exc}"
            self._post(ev.BootFailed(function=function, instance=instance, error=error))
            return
        finished = ev.BootFinished(function=function, instance=instance, entry=entry, booted=booted)
        self._post(finished)

    def _ready(self, event: ev.BootFinished) -> None:
        """A worker booted. The instance serves and takes the requests that waited for it;
        a start nobody wants any more (removed, cancelled too late) is let go."""
        function, instance, entry = event.function, event.instance, event.entry
        if not self.deployed(function) or instance.state is not InstanceState.STARTING:
            self.background(event.booted.handle.stop(2.0))
            self._discard(function, instance)
            return
        chosen = self._instances.ready(function, instance, event.booted, entry.fixed_batch)
        function.health.started(self._clock.now() - instance.started_at_s)
        gpu = f", gpu {entry.gpu_index} at {entry.config.gpu_pct}%" if entry.config.gpu_pct else ""
        log.info(
            "instance %s ready: pid %d, batch %d, exec %.1f ms, cores %s%s",
            instance.instance_id,
            instance.pid,
            chosen.batch_size,
            chosen.exec_ms,
            instance.cpu_ids,
            gpu,
        )
        function.router.instance_ready(instance)
        self._changed(function)
        self._reconcile(function)

    def _boot_failed(self, function: DeployedFunction, instance: Instance, error: str) -> None:
        log.error("instance %s failed to start: %s", instance.instance_id, error)
        self._instances.start_failed(instance, error)
        delay_s = function.health.failed(error, self._clock.now())
        function.router.remove(instance)
        self._forget(instance)
        function.router.start_failed(error)
        retry = asyncio.create_task(self._retry_later(function, delay_s))
        self._retries.add(retry)
        retry.add_done_callback(self._retries.discard)

    async def _retry_later(self, function: DeployedFunction, delay_s: float) -> None:
        await self._clock.sleep_until(self._clock.now() + delay_s)
        self._post(ev.DesiredChanged(function=function))

    def _discard(self, function: DeployedFunction, instance: Instance) -> None:
        """A start was cancelled (no longer wanted, or shutdown): the starter let go of it."""
        self._instances.start_failed(instance)
        function.router.remove(instance)
        self._forget(instance)

    def _died(self, function: DeployedFunction, instance: Instance) -> None:
        """The starter saw the worker exit. A serving instance hands its requests back
        (`InstanceLost`, next); a start that fails is the boot's to report, and a drain's
        runner sees its own worker die. The instance's serving loop may have seen the exit
        first (a batch's socket closed, `worker_lost`): the cause is still recorded here,
        where the starter can say it (killed for memory)."""
        if instance.state is not InstanceState.READY and not instance.worker_lost:
            return
        code = getattr(instance.handle, "exit_code", None)
        server = self._servers.get(instance.server_id)
        cause = None if server is None else server.starter.death_cause(instance.worker_id)
        error = cause or f"worker exited (code {code})"
        said = cause or f"died (exit {code})"
        log.warning("instance %s: worker pid %d %s", instance.instance_id, instance.pid, said)
        function.health.last_error = f"instance {instance.instance_id}: {error}"
        instance.mark_dead(error)

    def _orphaned(
        self, function: DeployedFunction, instance: Instance, orphans: list[Pending]
    ) -> None:
        """A dead instance's requests go to the others (or wait for its replacement)."""
        function.router.remove(instance)
        self._forget(instance)
        function.router.adopt_orphans(orphans)
        self._changed(function)
        self._reconcile(function)

    def _retune(self, function: DeployedFunction, due: RetuneDue) -> None:
        """The loop's decision: new batch settings from what the instance measured."""
        instance = due.instance
        if instance.state is InstanceState.READY:
            instance.retune(self._instances.retuned(function, instance, due.exec_ms))

    async def drain(self, function: DeployedFunction, instance: Instance) -> None:
        """The drain's task: answer what it queued, then hand its worker back to its
        starter, which may keep it warm (its store holds go with it) or stop it."""
        timeout_s = max(5.0, function.spec.slo_ms / 1000.0 * 10)
        kept = False
        try:
            await instance.drain(timeout_s=timeout_s, stop_worker=False)
            kept = await self._hand_back(instance, self.deployed(function), timeout_s)
        finally:
            self._post(ev.DrainFinished(function=function, instance=instance, kept=kept))

    async def _hand_back(self, instance: Instance, keep: bool, timeout_s: float) -> bool:
        handle = instance.handle
        if handle is None:
            return False
        server = self._servers.get(instance.server_id)
        order = self._instances.order(instance.worker_id)
        if server is None or order is None:  # its server left: nothing keeps it
            await handle.stop(timeout_s)
            return False
        retiring = Retiring(
            order=order, handle=handle, history=instance.history, keep=keep, timeout_s=timeout_s
        )
        return await server.starter.retire(retiring)

    def _drained(self, function: DeployedFunction, instance: Instance, kept: bool) -> None:
        """A drain finished. A kept worker gives its cores back (its store holds stay with
        it); a stopped one is forgotten."""
        function.router.remove(instance)
        if kept:
            if self._instances.let_go(instance.worker_id):
                server = self._servers.get(instance.server_id)
                if server is not None:
                    server.allocator.release(instance.worker_id)
        else:
            self._forget(instance)
        self._changed(function)

    def _forget(self, instance: Instance) -> None:
        """An instance is gone for good: free its cores, store holds and cgroup (once)."""
        if not self._instances.let_go(instance.worker_id):
            return
        server = self._servers.get(instance.server_id)
        if server is not None:  # a server that left took its cores and workers with it
            server.allocator.release(instance.worker_id)
            self.background(server.starter.release(instance.worker_id))

    def _changed(self, function: DeployedFunction) -> None:
        if self._on_change is not None:
            self._on_change(function)

    def background(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def wind_down(self) -> None:
        """Shutdown: cancel pending start retries, await drains and releases."""
        for task in list(self._retries):
            task.cancel()
        await asyncio.gather(*self._background, *self._retries, return_exceptions=True)

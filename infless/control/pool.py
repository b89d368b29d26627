"""WorkerPool: the reconciler's public face. Running instances follow each function's desired
state.

A function's `desired` changes only through `change(name, transition)` (`control.desired`):
a person's scale, the autoscaler's plan (`apply`, the scaling port), the cold-start
release and wake. `change` writes the new state and posts `DesiredChanged`.

Everything else arrives as an event on the same queue (`control.events`, `control.loop`):
a request that found nothing running, a worker that booted, failed to boot or died, a
drain that finished, an instance due to retune, a server that left. One consumer takes
them in order (`control.reconcile`): reconciling happens only there. Starts and drains run
as tasks that post their completion back, so no handler ever awaits.

The pool owns the deployed functions, the servers (`add_server`, `remove_server`) and
shutdown. It decides nothing itself, and it calls starters only through their protocol
(`workers.starting`). Gateway side: never imports torch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from functools import partial
from pathlib import Path

from infless.clock import Clock
from infless.control import desired as d
from infless.control import events as ev
from infless.control.functions import DeployedFunction, same_serving
from infless.control.instances import InstanceRegistry
from infless.control.loop import EventQueue
from infless.control.port import Snapshot
from infless.control.reconcile import Reconciler
from infless.control.servers import Server, ServerSet
from infless.control.snapshot import function_state
from infless.dataplane.config import BatchingConfig
from infless.dataplane.instance import Instance
from infless.dataplane.latency import FunctionLatency
from infless.dataplane.router import FunctionRouter
from infless.errors import FunctionNotFound, WorkerUnavailable
from infless.models.package import PackageManifest
from infless.scaling.view import ScalingPlan
from infless.types import FunctionSpec

log = logging.getLogger(__name__)

Transition = Callable[[d.DesiredState, d.InstanceMint], d.DesiredState]


class WorkerPool:
    """This server's deployed functions and servers; its loop makes instances follow them."""

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
        self.functions: dict[str, DeployedFunction] = {}
        self.instances = InstanceRegistry(clock, batching)
        self._loop = Reconciler(
            clock=clock,
            functions=self.functions,
            servers=self.servers,
            instances=self.instances,
            post=self.post,
            on_change=on_instance_change,
        )
        self.events: EventQueue[ev.Event] = EventQueue(self._loop.handle)

    async def start(self) -> None:
        await self.servers.start()

    def post(self, event: ev.Event) -> None:
        """Queue an event for the reconcile loop (never awaits, never reconciles here)."""
        self.events.post(event)

    async def settled(self) -> None:
        """Return once the loop has handled every event posted so far."""
        await self.events.settled()

    # -- servers -------------------------------------------------------------------------
    async def add_server(self, server: Server) -> None:
        """A server joined: its starter starts, and instances waiting for a server go there."""
        await server.starter.start()
        self.servers[server.server_id] = server
        for function in list(self.functions.values()):
            self.post(ev.DesiredChanged(function=function))

    def remove_server(self, server_id: str, reason: str) -> None:
        """A server left (its node died). The loop replaces its instances: their requests
        are retried on the others, and their entries move to the servers that remain."""
        server = self.servers.get(server_id)
        if server is not None:
            self.post(ev.ServerLeft(server=server, reason=reason))

    # -- function definitions -----------------------------------------------------------
    def deploy(
        self, spec: FunctionSpec, package_dir: Path, manifest: PackageManifest
    ) -> DeployedFunction:
        waiting_capacity = max(64, spec.max_batch * self._batching.queue_capacity_batches)
        router = FunctionRouter(spec.name, self._clock, waiting_capacity, self)
        function = DeployedFunction(
            spec=spec,
            package_dir=package_dir,
            manifest=manifest,
            router=router,
            desired=d.DesiredState(self._owner),
            latency=FunctionLatency(spec.slo_ms, self._batching.tail_quantile),
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
        """Undeploy: cancel its starts, fail what waits, drain its instances; returns once
        the loop has let go of all of them."""
        function = self.functions.pop(name, None)
        if function is None:
            raise FunctionNotFound(f"function {name!r} is not deployed")
        boots = list(function.boots.values())
        for task in boots:
            task.cancel()
        gone = "the gateway is shutting down" if self._loop.stopping else "it was removed"
        function.router.fail_all(WorkerUnavailable(f"function {name!r}: {gone}"))
        await asyncio.gather(
            *boots,
            *(self._loop.drain(function, i) for i in list(function.router.instances)),
            return_exceptions=True,
        )
        await self.settled()

    def get(self, name: str) -> DeployedFunction:
        function = self.functions.get(name)
        if function is None:
            raise FunctionNotFound(
                f"function {name!r} is not deployed; GET /system/functions lists what is"
            )
        return function

    # -- desired state: the one way to say what should run ------------------------------
    def change(self, name: str, transition: Transition) -> d.DesiredState:
        """Apply an owner's transition to the function's desired state. The loop
        reconciles it next; the new state is returned at once."""
        function = self.get(name)
        function.desired = transition(function.desired, self._loop.mint(function))
        self.post(ev.DesiredChanged(function=function))
        return function.desired

    # -- the scaling port ----------------------------------------------------------------
    def apply(self, plan: ScalingPlan) -> None:
        """The plan's actions, function by function (`ScalingPlan.by_function`: a start of
        the pass gets the cores of an instance it stops, `CpuAllocator`)."""
        for name, actions in plan.by_function():
            if name in self.functions:
                self.change(name, partial(d.applied, actions=actions))

    def snapshot(self) -> Snapshot:
        now = self._clock.now()
        states = tuple(function_state(f, now) for f in self.functions.values())
        return Snapshot(self.servers.views(self.functions.values()), states, now)

    # -- reading -------------------------------------------------------------------------
    def all_instances(self) -> list[Instance]:
        return [i for f in self.functions.values() for i in f.router.instances]

    def holder_ids(self) -> list[str]:
        """Every worker that may hold store tensors: starting, ready, draining, or kept
        warm by a starter (templates, idle and standby workers)."""
        return [*self.instances.holding(), *self.servers.starter_holders()]

    # -- shutdown ------------------------------------------------------------------------
    async def stop(self) -> None:
        """Drain every instance (queued requests are answered), then stop the starters."""
        self._loop.stopping = True
        for name in list(self.functions):
            with contextlib.suppress(FunctionNotFound):
                await self.remove(name)
        await self._loop.wind_down()
        await self.events.close()
        await self.servers.close()

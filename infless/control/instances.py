"""`InstanceRegistry`: the one owner of the pool's running instances and their transitions.

An instance is created here when the pool starts one (STARTING, its cores assigned, its worker
id minted: `<id>` for the first worker of an entry, `<id>-r<n>` for its replacements), made
ready here from what its starter booted (batch settings from the measured warm-up, the start's
breakdown and the worker's history), failed or discarded here when its start does not finish,
and given its dispatch share here. It remembers the boot order of every worker it started
(a starter retiring the worker is told how it was started) and which workers still hold
cores and store tensors, so that they are freed exactly once. Requests and queues stay the
data plane's (`dataplane.router`, `dataplane.instance`); desired states the pool's.
Gateway side: never imports torch.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from infless.clock import Clock
from infless.control import desired as d
from infless.control.functions import DeployedFunction
from infless.control.servers import Server
from infless.dataplane.config import BatchingConfig
from infless.dataplane.instance import Instance
from infless.dataplane.policy import BatchSettings, instance_settings
from infless.dataplane.request import Pending
from infless.workers.starting import Booted, BootOrder

Orphaned = Callable[[DeployedFunction, Instance, list[Pending]], None]


class InstanceRegistry:
    def __init__(self, clock: Clock, batching: BatchingConfig, on_orphans: Orphaned) -> None:
        self._clock = clock
        self._batching = batching
        self._on_orphans = on_orphans
        self._generations: dict[str, int] = {}  # instance id -> workers started for it
        self._holding: set[str] = set()  # worker ids still holding cores and store tensors
        self._orders: dict[str, BootOrder] = {}  # worker id -> the order it was booted with

    def create(
        self,
        function: DeployedFunction,
        entry: d.WantedInstance,
        server: Server,
        on_death: Callable[[Instance], None],
    ) -> tuple[Instance, BootOrder]:
        """A new STARTING instance of `entry` on `server`, with its cores and its boot order."""
        generation = self._generations.get(entry.instance_id, 0)
        self._generations[entry.instance_id] = generation + 1
        worker_id = entry.instance_id if generation == 0 else f"{entry.instance_id}-r{generation}"
        cores = server.allocator.assign(entry.config.cpus)
        self._holding.add(worker_id)
        instance = Instance(
            instance_id=entry.instance_id,
            function_name=function.name,
            config=entry.config,
            cpu_ids=cores,
            clock=self._clock,
            input_specs=function.input_specs,
            on_orphans=lambda inst, orphans: self._on_orphans(function, inst, orphans),
            worker_id=worker_id,
            tail_quantile=self._batching.tail_quantile,
            server_id=server.server_id,
            gpu_index=entry.gpu_index if entry.config.gpu_pct > 0 else None,
        )
        # what admission may count on while it starts (`dataplane.starting`)
        instance.expected_ready_s = function.health.expected_ready_s(instance.started_at_s)
        order = function.boot_order(
            worker_id,
            entry.instance_id,
            entry.config,
            cores,
            on_death=lambda: on_death(instance),
            gpu_index=entry.gpu_index,
        )
        self._orders[worker_id] = order
        return instance, order

    def ready(
        self, function: DeployedFunction, instance: Instance, booted: Booted, fixed_batch: bool
    ) -> BatchSettings:
        """The instance serves: its batch settings from the worker's measured warm-up (the
        planned batch size when `fixed_batch`, else the largest feasible one)."""
        spec = function.spec
        settings = partial(instance_settings, self._batching, spec.slo_ms, spec.max_batch)
        fixed = instance.config.batch_size if fixed_batch else None
        chosen = settings(dict(booted.ready.exec_ms), fixed)
        instance.become_ready(
            booted.handle,
            chosen,
            booted.ready,
            retune=lambda exec_ms: settings(exec_ms, chosen.batch_size),
            start=booted.start,
            history=booted.history,
            gpu_uuid=booted.gpu_uuid,
        )
        return chosen

    @staticmethod
    def set_share(instance: Instance, share_rps: float) -> None:
        instance.set_share(share_rps)

    @staticmethod
    def start_failed(instance: Instance, error: str | None = None) -> None:
        """Its start failed (`error`) or was cancelled (None): it never served."""
        instance.start_failed(error)

    def order(self, worker_id: str) -> BootOrder | None:
        return self._orders.get(worker_id)

    def let_go(self, worker_id: str) -> bool:
        """The worker no longer holds its cores (and, unless kept warm by its starter, its
        store tensors): True the first time only."""
        self._orders.pop(worker_id, None)
        if worker_id not in self._holding:
            return False
        self._holding.discard(worker_id)
        return True

    def holding(self) -> list[str]:
        return list(self._holding)

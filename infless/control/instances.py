"""`InstanceRegistry`: the one owner of the pool's instances and their transitions.

The pool starts an instance here: STARTING, its cores assigned, its worker id minted (`<id>`
for an entry's first worker, `<id>-r<n>` for its replacements). It becomes ready here from
what its starter booted (batch settings from the measured warm-up, the start's breakdown,
the worker's history). A start that does not finish is failed or discarded here. Dispatch
shares and retunes (batch timeout and queue bound from measured service times:
`batch_settings`, pure) are decided here for the reconcile loop.

The registry remembers each worker's boot order (a starter retiring a worker is told how it
was started) and which workers still hold cores and store tensors, so each is freed once.
Requests and queues stay the data plane's; desired states the pool's.
Gateway side: never imports torch.
"""

from __future__ import annotations

from collections.abc import Callable

from infless.clock import Clock
from infless.control import desired as d
from infless.control.functions import DeployedFunction
from infless.control.servers import Server
from infless.dataplane.config import BatchingConfig
from infless.dataplane.events import InstanceSink
from infless.dataplane.instance import Instance
from infless.dataplane.policy import BatchSettings, instance_settings
from infless.types import FunctionSpec
from infless.workers.starting import Booted, BootOrder


class InstanceRegistry:
    def __init__(self, clock: Clock, batching: BatchingConfig) -> None:
        self._clock = clock
        self._batching = batching
        self._generations: dict[str, int] = {}  # instance id -> workers started for it
        self._holding: set[str] = set()  # worker ids still holding cores and store tensors
        self._orders: dict[str, BootOrder] = {}  # worker id -> the order it was booted with

    def create(
        self,
        function: DeployedFunction,
        entry: d.WantedInstance,
        server: Server,
        *,
        events: InstanceSink,
        on_death: Callable[[Instance], None],
    ) -> tuple[Instance, BootOrder]:
        """A new STARTING instance of `entry` on `server`, with its cores and its boot order.

        The instance posts its events to `events`; the starter calls `on_death` when the
        worker exits."""
        generation = self._generations.get(entry.instance_id, 0)
        self._generations[entry.instance_id] = generation + 1
        worker_id = entry.instance_id if generation == 0 else f"{entry.instance_id}-r{generation}"
        cores = server.allocator.assign(entry.config.cpus, worker_id)
        self._holding.add(worker_id)
        instance = Instance(
            instance_id=entry.instance_id,
            function_name=function.name,
            config=entry.config,
            cpu_ids=cores,
            clock=self._clock,
            input_specs=function.input_specs,
            events=events,
            worker_id=worker_id,
            tail_quantile=self._batching.tail_quantile,
            server_id=server.server_id,
            gpu_index=entry.gpu_index if entry.config.gpu_pct > 0 else None,
        )
        # what admission may count on while it starts (`dataplane.starting`)
        instance.expected_ready_s = function.health.expected_ready_s(instance.started_at_s)
        order = function.boot_order(
            worker_id=worker_id,
            instance_id=entry.instance_id,
            config=entry.config,
            cpu_ids=cores,
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
        fixed = instance.config.batch_size if fixed_batch else None
        chosen = batch_settings(
            self._batching, function.spec, dict(booted.ready.exec_ms), fixed_batch=fixed
        )
        instance.become_ready(
            booted.handle,
            chosen,
            booted.ready,
            start=booted.start,
            history=booted.history,
            gpu_uuid=booted.gpu_uuid,
        )
        return chosen

    def retuned(
        self, function: DeployedFunction, instance: Instance, exec_ms: dict[int, float]
    ) -> BatchSettings:
        """The loop's retune decision for a serving instance: its batch size stays (it was
        started for it); timeout and queue bound follow the service times it measured."""
        return batch_settings(
            self._batching, function.spec, exec_ms, fixed_batch=instance.config.batch_size
        )

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


def batch_settings(
    batching: BatchingConfig,
    spec: FunctionSpec,
    exec_ms: dict[int, float],
    *,
    fixed_batch: int | None,
) -> BatchSettings:
    """Batch settings from measured service times (pure): `fixed_batch` keeps that batch
    size; None picks the largest feasible one (`dataplane.policy.instance_settings`)."""
    return instance_settings(batching, spec.slo_ms, spec.max_batch, exec_ms, fixed_batch)

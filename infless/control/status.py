"""The read-only status interfaces the gateway's routes get, and the adapter over the pool
that implements them.

Routes never get the pool. They get `FunctionsView` (the deployed functions and their
status views), `InstancesView` (the instances, the kept workers, the templates) and
`ServersView` (the servers and their load). `PoolStatus` implements all three by reading
the pool's public attributes; it changes nothing. Deploying, updating, scaling and
removing go through `control.service.FunctionService`, never through these.
Gateway side: never imports torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import msgspec
from msgspec import UNSET

from infless.coldstart.views import ColdStartView
from infless.control.desired import Owner
from infless.control.failed import FailedDeployment
from infless.control.functions import DeployedFunction
from infless.control.servers import Server
from infless.control.snapshot import server_view
from infless.control.views import (
    FunctionStatusView,
    InstanceStatusView,
    PlannerView,
    ServerStatusView,
    SignatureView,
    StartView,
    TensorView,
)
from infless.dataplane.instance import Instance, InstanceState
from infless.dataplane.views import AdmissionView
from infless.workers.status import KeptWorkerView, TemplateView, WorkerView

if TYPE_CHECKING:
    from infless.control.autoscaler import Autoscaler
    from infless.control.pool import WorkerPool
    from infless.types import FunctionSpec, TensorSpec


class FunctionsView(Protocol):
    """The deployed functions, read-only."""

    @property
    def deployed(self) -> Mapping[str, DeployedFunction]:
        """The records, by name (the metrics and the board read their counters)."""
        ...

    def function(self, name: str) -> FunctionStatusView:
        """The deployed function `name` (FunctionNotFound when it is not)."""
        ...

    def functions(self) -> list[FunctionStatusView]:
        """Every deployed function, then every one that failed to deploy."""
        ...

    def detail(
        self,
        function: DeployedFunction,
        *,
        cold_start_policy: ColdStartView | None,
        admission: AdmissionView,
    ) -> FunctionStatusView:
        """A function's status with its detail (`/system/function/NAME`)."""
        ...

    def planner(self, function: DeployedFunction) -> PlannerView | None:
        """The autoscaler's last decision for it (None: it does not own it, or no decision)."""
        ...


class InstancesView(Protocol):
    """The instances, and the workers the starters keep without one, read-only."""

    def instances(self) -> list[Instance]:
        """Every instance's record, dead ones included (the metrics read them)."""
        ...

    def live(self, function: str | None = None) -> list[InstanceStatusView]:
        """The instances that are not dead (only `function`'s when given)."""
        ...

    def kept(self) -> list[KeptWorkerView]: ...

    def templates(self) -> list[TemplateView]: ...


@dataclass(frozen=True, slots=True)
class ServerLoad:
    """One server's capacity and what is free and busy on it now."""

    server_id: str
    capacity_cpus: int
    free_cpus: int
    idle_cores: int
    cores: tuple[tuple[int, int], ...]  # (core, instances on it)
    gpu_pct: tuple[int, ...]
    free_gpu_pct: tuple[int, ...]
    describe: Mapping[str, object]  # what it is (a cluster node's facts)
    facts: Mapping[str, object]  # what it reports live (its GPUs, its tensor store)


class ServersView(Protocol):
    """The servers instances run on, read-only."""

    def servers(self) -> list[ServerStatusView]: ...

    def loads(self) -> list[ServerLoad]: ...


class PoolStatus:
    """`FunctionsView`, `InstancesView` and `ServersView` over one pool."""

    def __init__(
        self,
        pool: WorkerPool,
        failed: Mapping[str, FailedDeployment],
        autoscaler: Autoscaler | None = None,
    ) -> None:
        self._pool = pool
        self._failed = failed
        self._autoscaler = autoscaler

    @property
    def deployed(self) -> Mapping[str, DeployedFunction]:
        return self._pool.functions

    def function(self, name: str) -> FunctionStatusView:
        return function_view(self._pool.get(name))

    def functions(self) -> list[FunctionStatusView]:
        deployed = [function_view(f) for f in self._pool.functions.values()]
        return deployed + [failed_view(f) for f in self._failed.values()]

    def detail(
        self,
        function: DeployedFunction,
        *,
        cold_start_policy: ColdStartView | None,
        admission: AdmissionView,
    ) -> FunctionStatusView:
        package = self._pool.servers.describe_function(function.package_dir)
        planner = self.planner(function)
        return msgspec.structs.replace(
            function_view(function),
            cold_start_policy=cold_start_policy,
            admission=admission,
            structure=package.structure,
            planner=msgspec.UNSET if planner is None else planner,
        )

    def planner(self, function: DeployedFunction) -> PlannerView | None:
        return planner_view(self._autoscaler, function)

    def instances(self) -> list[Instance]:
        return self._pool.all_instances()

    def live(self, function: str | None = None) -> list[InstanceStatusView]:
        servers = self._pool.servers
        return [
            instance_view(i, servers.describe_worker(i))
            for i in self._pool.all_instances()
            if (not function or i.function_name == function) and i.state is not InstanceState.DEAD
        ]

    def kept(self) -> list[KeptWorkerView]:
        return self._pool.servers.kept()

    def templates(self) -> list[TemplateView]:
        return self._pool.servers.templates()

    def loads(self) -> list[ServerLoad]:
        functions = list(self._pool.functions.values())
        return [server_load(s, functions) for s in self._pool.servers.values()]

    def servers(self) -> list[ServerStatusView]:
        instances = self._pool.all_instances()
        return [
            server_status(load, sum(1 for i in instances if i.server_id == load.server_id))
            for load in self.loads()
        ]


def _signature(specs: tuple[TensorSpec, ...]) -> list[TensorView]:
    return [TensorView(name=s.name, dtype=s.dtype, shape=list(s.shape)) for s in specs]


def _status(
    spec: FunctionSpec,
    *,
    invocation_count: float,
    replicas: int,
    available_replicas: int,
    state: str,
    last_error: str | None,
    signature: SignatureView,
    counters: Counters | None = None,
) -> FunctionStatusView:
    """What was asked for (the spec), then how the function stands."""
    return FunctionStatusView(
        name=spec.name,
        image=spec.image,
        namespace=spec.namespace,
        env_process=spec.env_process,
        env_vars=spec.env_vars,
        labels=spec.labels,
        annotations=spec.annotations,
        secrets=list(spec.secrets),
        limits=spec.limits or None,
        created_at=spec.created_at or None,
        latency_target_ms=spec.slo_ms,
        max_batch=spec.max_batch,
        cpus_per_instance=spec.cpus_per_instance,
        min_instances=spec.min_instances,
        max_instances=spec.max_instances,
        tenant=spec.tenant,
        invocation_count=invocation_count,
        replicas=replicas,
        available_replicas=available_replicas,
        cold_starts=UNSET if counters is None else counters.cold_starts,
        rejected=UNSET if counters is None else counters.rejected,
        retries=UNSET if counters is None else counters.retries,
        state=state,
        last_error=last_error,
        owner=UNSET if counters is None else counters.owner,
        signature=signature,
    )


@dataclass(frozen=True, slots=True)
class Counters:
    """What only a deployed function has: its router's counters and its owner."""

    cold_starts: int
    rejected: int
    retries: int
    owner: str


def function_view(function: DeployedFunction) -> FunctionStatusView:
    """A deployed function: what was asked, its counters, its state and its signature."""
    manifest = function.manifest
    router = function.router
    return _status(
        function.spec,
        invocation_count=float(function.activity.invocations),
        replicas=function.desired.count,
        available_replicas=router.ready_count,
        state=function.state,
        last_error=function.health.last_error,
        signature=SignatureView(
            inputs=_signature(manifest.input_specs),
            outputs=_signature(manifest.output_specs),
        ),
        counters=Counters(
            cold_starts=router.cold_starts,
            rejected=router.rejected,
            retries=router.retries,
            owner=function.desired.owner.value,
        ),
    )


def failed_view(failed: FailedDeployment) -> FunctionStatusView:
    """A function that could not be deployed: what was asked, `failed`, and why."""
    return _status(
        failed.spec,
        invocation_count=0.0,
        replicas=0,
        available_replicas=0,
        state="failed",
        last_error=failed.error,
        signature=SignatureView(inputs=[], outputs=[]),
    )


def instance_view(instance: Instance, worker: WorkerView) -> InstanceStatusView:
    """One instance, with its worker as its starters describe it."""
    start = instance.start_breakdown
    model = instance.model
    queue = instance.queue
    timeout_ms = None if queue is None else round(queue.settings.timeout_s * 1000, 3)
    service = None if model is None else sorted(model.by_batch().items())
    return InstanceStatusView(
        instance_id=instance.instance_id,
        function=instance.function_name,
        server=instance.server_id,
        batch_size=instance.config.batch_size,
        cpus=instance.config.cpus,
        cpu_ids=list(instance.cpu_ids),
        gpu_pct=instance.config.gpu_pct,
        gpu_device=instance.gpu_uuid,
        pid=instance.pid,
        state=instance.state.value,
        served=instance.served,
        failed=instance.failed,
        batches=instance.batches,
        queue_length=instance.queue_length,
        in_flight=instance.in_flight,
        share_rps=round(instance.share_rps, 3),
        batch_timeout_ms=timeout_ms,
        exec_ms_by_batch={str(b): round(ms, 3) for b, ms in instance.exec_ms_by_batch.items()},
        service_ms_by_batch=None
        if service is None
        else {str(b): round(ms, 3) for b, ms in service},
        tail_ratio=None if model is None else round(model.tail_ratio, 3),
        target_batch=None if queue is None else queue.target,
        start=StartView(
            spawn_ms=round(start.spawn_ms, 1),
            build_ms=round(start.build_ms, 1),
            attach_ms=round(start.attach_ms, 1),
            warmup_ms=round(start.warmup_ms, 1),
            transform_ms=round(start.transform_ms, 1),
        ),
        history=instance.history,
        error=instance.error,
        **msgspec.structs.asdict(worker),
    )


def planner_view(autoscaler: Autoscaler | None, function: DeployedFunction) -> PlannerView | None:
    """The autoscaler's last decision for a function it owns: its demand, regime, what no
    capacity was found for and the configurations no predictor could price."""
    if autoscaler is None or function.desired.owner is not Owner.AUTOSCALER:
        return None
    decision = autoscaler.decision(function.name)
    if decision is None:
        return None
    return PlannerView(
        demand_rps=decision.demand_rps,
        regime=decision.regime.value,
        unmet_rps=decision.unmet_rps,
        unpriced=list(decision.unpriced),
    )


def server_load(server: Server, functions: list[DeployedFunction]) -> ServerLoad:
    """A server's capacity and what the wanted and draining instances leave free."""
    loads = server.allocator.load()
    idle = sum(1 for load in loads.values() if load == 0)
    view = server_view(functions, server.server_id, server.capacity_cpus, server.gpu_pct, idle)
    return ServerLoad(
        server_id=server.server_id,
        capacity_cpus=server.capacity_cpus,
        free_cpus=view.free_cpus,
        idle_cores=idle,
        cores=tuple(sorted(loads.items())),
        gpu_pct=server.gpu_pct,
        free_gpu_pct=view.free_gpu_pct,
        describe=dict(server.describe),
        facts={} if server.status is None else dict(server.status()),
    )


def server_status(load: ServerLoad, instances: int) -> ServerStatusView:
    """`/system/servers`' entry for one server (`instances`: how many run on it). What it
    is and what it reports are its owners' plain facts, checked against the view's types
    here (a fact the view does not name is left out)."""
    described = {
        "id": load.server_id,
        "cpus": load.capacity_cpus,
        "freeCpus": load.free_cpus,
        "gpuPct": list(load.gpu_pct),
        "freeGpuPct": list(load.free_gpu_pct),
        "instances": instances,
        **load.describe,
        **load.facts,
    }
    return msgspec.convert(described, type=ServerStatusView)

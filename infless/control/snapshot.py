"""The scaling port's snapshot of the pool (`WorkerPool.snapshot`).

It holds each server's free capacity and, per function, the planner's view (with its
model's memory figures), its owner, demand, activity and measurements. It reads them from
the desired states and the data plane. Read-only: it changes nothing. Gateway side: never
imports torch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from infless.control.functions import DeployedFunction
from infless.control.port import ActivityView, FunctionState, Measured, Serving
from infless.dataplane.instance import Instance, InstanceState
from infless.dataplane.latency import mean_service_ms, mean_tail_ratio
from infless.scaling.memory import ModelMemory
from infless.scaling.view import FunctionView, InstanceView, ServerView
from infless.scaling.view import InstanceState as ViewState

LIVE = (InstanceState.STARTING, InstanceState.READY)


def server_view(
    functions: Iterable[DeployedFunction],
    server_id: str,
    capacity_cpus: int,
    gpu_pct: tuple[int, ...],
    idle_cores: int,
    affinity: Mapping[str, float] | None = None,
) -> ServerView:
    """This server: its capacity, what the wanted and draining instances leave free, and its
    affinity for each function (what it holds of it already: placement prefers that)."""
    used_cpus = 0
    used_gpu = [0] * len(gpu_pct)
    for function in functions:
        for wanted in function.desired.instances:
            if wanted.server_id != server_id:
                continue
            used_cpus += wanted.config.cpus
            if wanted.gpu_index is not None and 0 <= wanted.gpu_index < len(used_gpu):
                used_gpu[wanted.gpu_index] += wanted.config.gpu_pct
        for instance in function.router.instances:
            if instance.state is InstanceState.DRAINING and instance.server_id == server_id:
                used_cpus += instance.config.cpus
                device = instance.gpu_index
                if device is not None and 0 <= device < len(used_gpu):
                    used_gpu[device] += instance.config.gpu_pct
    free_gpu = tuple(max(0, c - u) for c, u in zip(gpu_pct, used_gpu, strict=True))
    free_cpus = max(0, capacity_cpus - used_cpus)
    return ServerView(
        server_id=server_id,
        cpus=capacity_cpus,
        free_cpus=free_cpus,
        gpu_pct=gpu_pct,
        free_gpu_pct=free_gpu,
        idle_cores=idle_cores,
        affinity=dict(affinity or {}),
    )


def function_state(function: DeployedFunction, now: float) -> FunctionState:
    """What the policies see of one function: the planner's view, owner, demand, activity."""
    spec, activity = function.spec, function.activity
    view = FunctionView(
        name=spec.name,
        model_key=spec.image,
        slo_ms=spec.slo_ms,
        max_batch=spec.max_batch,
        min_instances=max(spec.min_instances, 0),
        max_instances=spec.max_instances,
        instances=instance_views(function, now),
        memory=model_memory(function),
    )
    ready = [i for i in function.router.instances if i.state is InstanceState.READY]
    return FunctionState(
        view=view,
        owner=function.desired.owner,
        arrivals=function.router.arrivals,
        scale_to_zero=function.scale_to_zero,
        activity=ActivityView(
            activity.outstanding,
            activity.idle_since_s,
            activity.last_finish_s,
            tuple(activity.idle_arrivals),
            activity.idle_arrival_count,
        ),
        start_s=function.health.last_start_s,
        measured=tuple(
            Measured(i.config.cpus, dict(i.exec_ms_by_batch), i.config.gpu_pct) for i in ready
        ),
        p99_ms=function.latency.p99_ms(now),
        refused=function.router.rejected,
        answered=function.latency.answered,
        serving=serving(ready),
    )


def model_memory(function: DeployedFunction) -> ModelMemory:
    """What one instance of the function holds, as far as this server knows: the package's
    weights (its manifest) and the assumed worker runtime. Activations are not measured
    here yet (0), so the DTS policy prices a batch by its rate alone on a real server."""
    return ModelMemory(weight_bytes=function.manifest.weights_bytes, activation_bytes_per_sample=0)


def serving(ready: list[Instance]) -> Serving:
    """The ready instances' running totals, summed, and how they stand now."""
    return Serving(
        served=sum(i.served for i in ready),
        batches=sum(i.batches for i in ready),
        exec_ms=sum(i.exec_ms_total for i in ready),
        ready=len(ready),
        max_batch=max((i.config.batch_size for i in ready), default=1),
        max_cpus=max((i.config.cpus for i in ready), default=1),
        queued=sum(i.queue_length for i in ready),
        tail_ratio=mean_tail_ratio(i.model for i in ready),
        service_ms_by_batch=mean_service_ms(i.model for i in ready),
    )


def instance_views(function: DeployedFunction, now: float) -> tuple[InstanceView, ...]:
    """Every wanted instance (ready, or starting) and every draining one."""
    running = {i.instance_id: i for i in function.router.instances if i.state in LIVE}
    views = []
    for wanted in function.desired.instances:
        instance = running.get(wanted.instance_id)
        if instance is not None and instance.state is InstanceState.READY:
            b = instance.config.batch_size
            views.append(
                InstanceView(
                    instance_id=wanted.instance_id,
                    function=function.name,
                    server_id=wanted.server_id,
                    config=instance.config,
                    state=ViewState.READY,
                    exec_ms=instance.exec_ms_by_batch.get(b),
                    service_ms=None if instance.model is None else instance.model.mean_ms(b),
                    started_s=instance.started_at_s,
                    idle_since_s=None if instance.busy else instance.last_active_s,
                )
            )
        else:  # starting, or waiting to be started again
            started_s = now if instance is None else instance.started_at_s
            views.append(
                InstanceView(
                    instance_id=wanted.instance_id,
                    function=function.name,
                    server_id=wanted.server_id,
                    config=wanted.config,
                    state=ViewState.STARTING,
                    exec_ms=wanted.exec_ms,
                    started_s=started_s,
                )
            )
    for instance in function.router.instances:
        if instance.state is InstanceState.DRAINING:
            views.append(
                InstanceView(
                    instance_id=instance.instance_id,
                    function=function.name,
                    server_id=instance.server_id,
                    config=instance.config,
                    state=ViewState.DRAINING,
                    started_s=instance.started_at_s,
                )
            )
    return tuple(views)

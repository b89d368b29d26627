"""OpenFaaS-compatible management routes (`/system/*`), health, readiness, info, instances,
templates, metrics.

Shapes follow faas-provider's types strictly (integers as integers, string maps, RFC 3339
`createdAt`) because faas-cli decodes them with Go's encoding/json. PUT on an unknown
function answers 404: faas-cli deploys with PUT and falls back to POST only on 404. A
function that failed to deploy is listed with the rest, `state: "failed"` and its reason in
`lastError`, and can be deployed again or removed like any other.
"""

from __future__ import annotations

import platform as host
from typing import TYPE_CHECKING, Any

import msgspec
import orjson
from aiohttp import web

from infless import __version__
from infless.control.desired import Owner
from infless.control.failed import FailedDeployment
from infless.control.functions import DeployedFunction
from infless.control.readiness import Readiness
from infless.dataplane.instance import Instance, InstanceState
from infless.errors import InvalidDeployment, InvalidInput, MalformedBody
from infless.types import FunctionSpec, TensorSpec

if TYPE_CHECKING:
    from infless.control.autoscaler import Autoscaler
    from infless.gateway.context import GatewayContext


def _json(data: object, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(data), content_type="application/json")


async def _read_json(request: web.Request) -> Any:
    try:
        return orjson.loads(await request.read())
    except orjson.JSONDecodeError as exc:
        raise MalformedBody(f"the body is not valid JSON: {exc}") from None


def _signature(specs: tuple[TensorSpec, ...]) -> list[dict[str, object]]:
    return [{"name": s.name, "dtype": s.dtype, "shape": list(s.shape)} for s in specs]


def _spec_status(spec: FunctionSpec) -> dict[str, object]:
    return {
        "name": spec.name,
        "image": spec.image,
        "namespace": spec.namespace,
        "envProcess": spec.env_process,
        "envVars": spec.env_vars,
        "labels": spec.labels,
        "annotations": spec.annotations,
        "secrets": list(spec.secrets),
        "limits": spec.limits or None,
        "createdAt": spec.created_at or None,
        "latencyTargetMs": spec.slo_ms,
        "maxBatch": spec.max_batch,
        "cpusPerInstance": spec.cpus_per_instance,
        "minInstances": spec.min_instances,
        "maxInstances": spec.max_instances,
        "tenant": spec.tenant,
    }


def failed_status(failed: FailedDeployment) -> dict[str, object]:
    """A function that could not be deployed: what was asked, `failed`, and why."""
    return {
        **_spec_status(failed.spec),
        "invocationCount": 0.0,
        "replicas": 0,
        "availableReplicas": 0,
        "state": "failed",
        "lastError": failed.error,
        "signature": {"inputs": [], "outputs": []},
    }


def function_status(function: DeployedFunction) -> dict[str, object]:
    manifest = function.manifest
    return {
        **_spec_status(function.spec),
        "invocationCount": float(function.activity.invocations),
        "replicas": function.desired.count,
        "availableReplicas": function.router.ready_count,
        "coldStarts": function.router.cold_starts,
        "rejected": function.router.rejected,
        "retries": function.router.retries,
        "state": function.state,
        "lastError": function.health.last_error,
        "owner": function.desired.owner.value,
        "signature": {
            "inputs": _signature(manifest.input_specs),
            "outputs": _signature(manifest.output_specs),
        },
    }


def instance_status(instance: Instance) -> dict[str, object]:
    start = instance.start_breakdown
    model = instance.model
    settings = instance.queue.settings if instance.queue is not None else None
    return {
        "id": instance.instance_id,
        "function": instance.function_name,
        "server": instance.server_id,
        "batchSize": instance.config.batch_size,
        "cpus": instance.config.cpus,
        "cpuIds": list(instance.cpu_ids),
        "gpuPct": instance.config.gpu_pct,
        "gpuDevice": instance.gpu_uuid,
        "pid": instance.pid,
        "state": instance.state.value,
        "served": instance.served,
        "failed": instance.failed,
        "batches": instance.batches,
        "queueLength": instance.queue_length,
        "inFlight": instance.in_flight,
        "shareRps": round(instance.share_rps, 3),
        "batchTimeoutMs": None if settings is None else round(settings.timeout_s * 1000, 3),
        "execMsByBatch": {str(b): round(ms, 3) for b, ms in instance.exec_ms_by_batch.items()},
        "serviceMsByBatch": None
        if model is None
        else {str(b): round(ms, 3) for b, ms in sorted(model.by_batch().items())},
        "tailRatio": None if model is None else round(model.tail_ratio, 3),
        "targetBatch": None if instance.queue is None else instance.queue.target,
        "start": {
            "spawnMs": round(start.spawn_ms, 1),
            "buildMs": round(start.build_ms, 1),
            "attachMs": round(start.attach_ms, 1),
            "warmupMs": round(start.warmup_ms, 1),
            "transformMs": round(start.transform_ms, 1),
        },
        "history": instance.history,
        "error": instance.error,
    }


def planner_report(
    autoscaler: Autoscaler | None, function: DeployedFunction
) -> dict[str, object] | None:
    """The autoscaler's last decision for a function it owns: its demand, regime, what no
    capacity was found for and the configurations no predictor could price."""
    if autoscaler is None or function.desired.owner is not Owner.AUTOSCALER:
        return None
    decision = autoscaler.decision(function.name)
    if decision is None:
        return None
    return {
        "demandRps": decision.demand_rps,
        "regime": decision.regime.value,
        "unmetRps": decision.unmet_rps,
        "unpriced": list(decision.unpriced),
    }


def readiness_answer(readiness: Readiness | None) -> web.Response:
    """200 with what settled when the gateway is ready (`control.readiness`), else 503."""
    if readiness is None:
        return _json({"ready": True})
    report = readiness.report()
    if report.ready:
        return _json(report.to_json())
    waiting = ", ".join(report.starting)
    error = f"not ready: waiting for {waiting} to start; GET /system/functions shows them"
    return _json({**report.to_json(), "error": error, "code": "not_ready"}, status=503)


class SystemRoutes:
    """The handlers of `/system/*`, `/healthz`, `/readyz` and `/metrics` (registered in
    `routes`)."""

    def __init__(self, ctx: GatewayContext) -> None:
        self._ctx = ctx

    async def healthz(self, request: web.Request) -> web.Response:
        """Liveness: the gateway answers (readiness is `readyz`)."""
        return web.Response(text="OK")

    async def readyz(self, request: web.Request) -> web.Response:
        return readiness_answer(self._ctx.readiness)

    async def info(self, request: web.Request) -> web.Response:
        version = {"sha": "infless", "release": __version__, "commit_message": ""}
        return _json(
            {
                "provider": {
                    "provider": "infless",
                    "orchestration": "local",
                    "version": {"sha": "infless", "release": __version__},
                },
                "version": version,
                "arch": host.machine(),
                "isolation": self._ctx.isolation(),
            }
        )

    async def list_functions(self, request: web.Request) -> web.Response:
        functions = self._ctx.pool.functions.values()
        namespace = request.query.get("namespace")
        listed = [function_status(f) for f in functions]
        listed += [failed_status(f) for f in self._ctx.functions.failed.values()]
        return _json([f for f in listed if not namespace or f["namespace"] == namespace])

    async def get_function(self, request: web.Request) -> web.Response:
        failed = self._ctx.frontend.failed(request.match_info["name"])
        if failed is not None:
            return _json(failed_status(failed))
        function = self._ctx.frontend.find(request.match_info["name"])
        status = function_status(function)
        status["coldStartPolicy"] = self._ctx.prewarm.describe(function.name)
        status["admission"] = msgspec.to_builtins(self._ctx.frontend.describe(function))
        status.update(self._ctx.pool.servers.describe_function(function.package_dir))
        planner = planner_report(self._ctx.autoscaler, function)
        if planner is not None:
            status["planner"] = planner
        return _json(status)

    async def create(self, request: web.Request) -> web.Response:
        spec = await self._ctx.functions.create(await _read_json(request))
        return _json(function_status(self._ctx.pool.get(spec.name)), status=202)

    async def update(self, request: web.Request) -> web.Response:
        spec = await self._ctx.functions.update(await _read_json(request))
        return _json(function_status(self._ctx.pool.get(spec.name)), status=202)

    async def delete(self, request: web.Request) -> web.Response:
        body = await _read_json(request)
        name = body.get("functionName") if isinstance(body, dict) else None
        if not isinstance(name, str) or not name:
            raise InvalidDeployment('functionName: is required, e.g. {"functionName": "mnist"}')
        failed = self._ctx.frontend.failed(name)
        name = failed.spec.name if failed is not None else self._ctx.frontend.find(name).name
        await self._ctx.functions.remove(name)
        return web.Response(status=202)

    async def scale(self, request: web.Request) -> web.Response:
        name = self._ctx.frontend.find(request.match_info["name"]).name
        body = await _read_json(request)
        replicas = body.get("replicas") if isinstance(body, dict) else None
        if not isinstance(replicas, int) or isinstance(replicas, bool):
            raise InvalidDeployment('replicas: an integer is required, e.g. {"replicas": 2}')
        self._ctx.functions.scale(name, replicas)
        return _json(function_status(self._ctx.pool.get(name)), status=202)

    async def instances(self, request: web.Request) -> web.Response:
        """Live instances; `state=idle`: the idle workers kept for transformation (`all`:
        both)."""
        function = request.query.get("function")
        state = request.query.get("state", "live")
        if state not in ("live", "idle", "all"):
            raise InvalidInput(f"state={state!r}: use live (the default), idle or all")
        pool = self._ctx.pool
        live = [
            instance_status(i) | pool.servers.describe_worker(i)
            for i in pool.all_instances()
            if (not function or i.function_name == function) and i.state is not InstanceState.DEAD
        ]
        idle = [w for w in pool.servers.kept() if not function or w["function"] == function]
        return _json({"live": live, "idle": idle, "all": live + idle}[state])

    async def templates(self, request: web.Request) -> web.Response:
        """The per-model template processes instances are forked from (workers.templates)."""
        return _json(self._ctx.pool.servers.templates())

    async def servers(self, request: web.Request) -> web.Response:
        """The servers instances run on: capacity, what is free, and what each reports."""
        pool = self._ctx.pool
        views = {v.server_id: v for v in pool.snapshot().servers}
        return _json(
            [
                {
                    "id": server.server_id,
                    "cpus": server.capacity_cpus,
                    "freeCpus": views[server.server_id].free_cpus,
                    "gpuPct": list(server.gpu_pct),
                    "freeGpuPct": list(views[server.server_id].free_gpu_pct),
                    "instances": sum(
                        1 for i in pool.all_instances() if i.server_id == server.server_id
                    ),
                    **server.describe,
                    **({} if server.status is None else server.status()),
                }
                for server in pool.servers.values()
            ]
        )

    async def metrics(self, request: web.Request) -> web.Response:
        ctx = self._ctx
        for name, function in ctx.pool.functions.items():
            ctx.metrics.set_instances(name, function.router.ready_count)
        return web.Response(
            body=ctx.metrics.render(),
            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
        )

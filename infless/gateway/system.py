"""OpenFaaS-compatible management routes (`/system/*`), health, info, instances, templates, metrics.

Shapes follow faas-provider's types strictly (integers as integers, string maps, RFC 3339
`createdAt`) because faas-cli decodes them with Go's encoding/json. PUT on an unknown
function answers 404: faas-cli deploys with PUT and falls back to POST only on 404.
"""

from __future__ import annotations

import platform as host
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web

from infless import __version__
from infless.dataplane.instance import Instance, InstanceState
from infless.errors import InvalidDeployment, MalformedBody
from infless.gateway.errors import json_errors
from infless.gateway.invoke import find_function_name
from infless.types import TensorSpec

if TYPE_CHECKING:
    from infless.app import Platform
    from infless.workers.pool import DeployedFunction


def _json(data: object, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(data), content_type="application/json")


async def _read_json(request: web.Request) -> Any:
    try:
        return orjson.loads(await request.read())
    except orjson.JSONDecodeError as exc:
        raise MalformedBody(f"the body is not valid JSON: {exc}") from None


def _signature(specs: tuple[TensorSpec, ...]) -> list[dict[str, object]]:
    return [{"name": s.name, "dtype": s.dtype, "shape": list(s.shape)} for s in specs]


def function_status(function: DeployedFunction) -> dict[str, object]:
    spec = function.spec
    manifest = function.manifest
    return {
        "name": spec.name,
        "image": spec.image,
        "namespace": spec.namespace,
        "envProcess": spec.env_process,
        "envVars": spec.env_vars,
        "labels": spec.labels,
        "annotations": spec.annotations,
        "invocationCount": float(function.invocations),
        "replicas": function.desired,
        "availableReplicas": function.router.ready_count,
        "createdAt": spec.created_at or None,
        "latencyTargetMs": spec.slo_ms,
        "maxBatch": spec.max_batch,
        "cpusPerInstance": spec.cpus_per_instance,
        "minInstances": spec.min_instances,
        "maxInstances": spec.max_instances,
        "tenant": spec.tenant,
        "coldStarts": function.router.cold_starts,
        "retries": function.router.retries,
        "lastError": function.last_error,
        "signature": {
            "inputs": _signature(manifest.input_specs),
            "outputs": _signature(manifest.output_specs),
        },
    }


def instance_status(instance: Instance) -> dict[str, object]:
    start = instance.start_breakdown
    settings = instance.queue.settings if instance.queue is not None else None
    return {
        "id": instance.instance_id,
        "function": instance.function_name,
        "batchSize": instance.config.batch_size,
        "cpus": instance.config.cpus,
        "cpuIds": list(instance.cpu_ids),
        "gpuPct": instance.config.gpu_pct,
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
        "start": {
            "spawnMs": round(start.spawn_ms, 1),
            "buildMs": round(start.build_ms, 1),
            "attachMs": round(start.attach_ms, 1),
            "warmupMs": round(start.warmup_ms, 1),
        },
        "error": instance.error,
    }


class SystemRoutes:
    def __init__(self, platform: Platform) -> None:
        self._platform = platform

    def register(self, app: web.Application) -> None:
        routes = [
            web.get("/healthz", self.healthz),
            web.get("/system/info", json_errors(self.info)),
            web.get("/system/functions", json_errors(self.list_functions)),
            web.post("/system/functions", json_errors(self.create)),
            web.put("/system/functions", json_errors(self.update)),
            web.delete("/system/functions", json_errors(self.delete)),
            web.get("/system/function/{name}", json_errors(self.get_function)),
            web.post("/system/scale-function/{name}", json_errors(self.scale)),
            web.get("/system/instances", json_errors(self.instances)),
            web.get("/system/templates", json_errors(self.templates)),
            web.get("/metrics", self.metrics),
        ]
        app.add_routes(routes)

    async def healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="OK")

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
            }
        )

    async def list_functions(self, request: web.Request) -> web.Response:
        functions = self._platform.pool.functions.values()
        namespace = request.query.get("namespace")
        return _json(
            [
                function_status(f)
                for f in functions
                if not namespace or f.spec.namespace == namespace
            ]
        )

    async def get_function(self, request: web.Request) -> web.Response:
        name = find_function_name(self._platform, request.match_info["name"])
        status = function_status(self._platform.pool.get(name))
        status["coldStartPolicy"] = self._platform.prewarm.describe(name)
        return _json(status)

    async def create(self, request: web.Request) -> web.Response:
        spec = await self._platform.functions.create(await _read_json(request))
        return _json(function_status(self._platform.pool.get(spec.name)), status=202)

    async def update(self, request: web.Request) -> web.Response:
        spec = await self._platform.functions.update(await _read_json(request))
        return _json(function_status(self._platform.pool.get(spec.name)), status=202)

    async def delete(self, request: web.Request) -> web.Response:
        body = await _read_json(request)
        name = body.get("functionName") if isinstance(body, dict) else None
        if not isinstance(name, str) or not name:
            raise InvalidDeployment('functionName: is required, e.g. {"functionName": "mnist"}')
        await self._platform.functions.remove(find_function_name(self._platform, name))
        return web.Response(status=202)

    async def scale(self, request: web.Request) -> web.Response:
        name = find_function_name(self._platform, request.match_info["name"])
        body = await _read_json(request)
        replicas = body.get("replicas") if isinstance(body, dict) else None
        if not isinstance(replicas, int) or isinstance(replicas, bool):
            raise InvalidDeployment('replicas: an integer is required, e.g. {"replicas": 2}')
        self._platform.functions.scale(name, replicas)
        return _json(function_status(self._platform.pool.get(name)), status=202)

    async def instances(self, request: web.Request) -> web.Response:
        function = request.query.get("function")
        booter = self._platform.pool.booter
        return _json(
            [
                instance_status(i)
                | {
                    "confinement": booter.describe(i.instance_id),
                    "template": booter.template_of(i.instance_id),
                }
                for i in self._platform.pool.all_instances()
                if (not function or i.function_name == function)
                and i.state is not InstanceState.DEAD
            ]
        )

    async def templates(self, request: web.Request) -> web.Response:
        """The per-model template processes instances are forked from (workers.templates)."""
        templates = self._platform.pool.booter.templates
        return _json([] if templates is None else templates.describe())

    async def metrics(self, request: web.Request) -> web.Response:
        platform = self._platform
        for name, function in platform.pool.functions.items():
            platform.metrics.set_instances(name, function.router.ready_count)
        return web.Response(
            body=platform.metrics.render(),
            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
        )

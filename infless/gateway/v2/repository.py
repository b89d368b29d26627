"""Triton's model repository extension mapped onto infless's functions.

`POST /v2/repository/index` lists deployed functions (with a Triton state) and the zoo
models not deployed yet (UNAVAILABLE, "unloaded"); `load` deploys a function — a zoo model
name deploys that model with default settings, and `parameters.config` may carry a JSON
FunctionDeployment (image, labels, annotations) — and `unload` removes it. Deploy logic
stays in `control.service`; this module only translates. Registered in `gateway.routes`.
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from infless.control.frontend import FunctionFrontend
from infless.control.functions import DeployedFunction
from infless.control.pool import WorkerPool
from infless.control.service import FunctionService
from infless.dataplane.instance import InstanceState
from infless.errors import BadRequest
from infless.gateway.v2.infer import MODEL_VERSION
from infless.models.zoo import ZOO


def _json(data: object) -> web.Response:
    return web.Response(body=orjson.dumps(data), content_type="application/json")


async def _optional_json(request: web.Request) -> dict[str, Any]:
    body = await request.read()
    if not body.strip():
        return {}
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"the body is not valid JSON: {exc}") from None
    if not isinstance(document, dict):
        raise BadRequest("the body must be a JSON object")
    return document


def _parameters(document: dict[str, Any]) -> dict[str, Any]:
    parameters = document.get("parameters") or {}
    if not isinstance(parameters, dict):
        raise BadRequest("parameters must be a JSON object")
    return parameters


def repository_state(function: DeployedFunction) -> tuple[str, str]:
    """Triton's (state, reason) for a deployed function."""
    router = function.router
    if router.ready_count > 0:
        return "READY", ""
    if any(i.state is InstanceState.STARTING for i in router.instances):
        return "LOADING", "an instance is starting"
    if function.desired.count == 0 and function.health.failures == 0:
        return "READY", "scaled to zero: the next request starts an instance"
    return "UNAVAILABLE", function.health.last_error or "no instance is running"


def load_deployment(name: str, parameters: dict[str, Any]) -> dict[str, Any]:
    """The FunctionDeployment a load request means."""
    if any(key.startswith("file:") for key in parameters):
        raise BadRequest("load: file: parameters (model files in the request) are not supported")
    deployment: dict[str, Any] = {"service": name, "image": name}
    config = parameters.get("config")
    if config is not None:
        try:
            extra = orjson.loads(config) if isinstance(config, str) else None
        except orjson.JSONDecodeError as exc:
            raise BadRequest(f"parameters.config is not valid JSON: {exc}") from None
        if not isinstance(extra, dict):
            raise BadRequest(
                "parameters.config must be a string holding a JSON object, "
                'e.g. {"image": "mnist"} serialized'
            )
        deployment.update(extra)
        deployment["service"] = name
    return deployment


class RepositoryRoutes:
    def __init__(
        self, frontend: FunctionFrontend, pool: WorkerPool, functions: FunctionService
    ) -> None:
        self._frontend = frontend
        self._pool = pool
        self._functions = functions

    async def index(self, request: web.Request) -> web.Response:
        document = await _optional_json(request)
        ready_only = document.get("ready") is True
        entries = []
        deployed = self._pool.functions
        for name, function in sorted(deployed.items()):
            state, reason = repository_state(function)
            if ready_only and state != "READY":
                continue
            entries.append(
                {"name": name, "version": MODEL_VERSION, "state": state, "reason": reason}
            )
        if not ready_only:
            for name in sorted(set(ZOO) - set(deployed)):
                entries.append({"name": name, "state": "UNAVAILABLE", "reason": "unloaded"})
        return _json(entries)

    async def load(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        parameters = _parameters(await _optional_json(request))
        functions = self._functions
        if name in self._pool.functions:
            if "config" in parameters:
                await functions.update(load_deployment(name, parameters))
        else:
            await functions.create(load_deployment(name, parameters))
        return _json({"name": name, "loaded": True})

    async def unload(self, request: web.Request) -> web.Response:
        _parameters(await _optional_json(request))  # unload_dependents: nothing depends here
        name = self._frontend.find(request.match_info["name"]).name
        await self._functions.remove(name)
        return _json({"name": name, "unloaded": True})

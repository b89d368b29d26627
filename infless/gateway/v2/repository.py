"""Triton's model repository extension mapped onto infless's functions.

`POST /v2/repository/index` lists deployed functions (with a Triton state), those that
failed to deploy (UNAVAILABLE, with the reason) and the zoo models not deployed yet
(UNAVAILABLE, "unloaded"); `load` deploys a function — a zoo model
name deploys that model with default settings, and `parameters.config` may carry a JSON
FunctionDeployment (image, labels, annotations) — and `unload` removes it. A load whose
parameters carry files (`file:<path>`, base64, as tritonclient's `load_model(files=...)`
sends them) stores them as a function package first (`packaging.store`, the checks of an
upload; a leading version directory `1/` is stripped) and deploys it by its digest; its
body is capped by `gateway.max_package_bytes`. Deploy logic stays in `control.service`;
this module only translates. Registered in `gateway.routes`.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from typing import Any

import orjson
from aiohttp import web

from infless.control.functions import DeployedFunction, FunctionFrontDoor
from infless.control.service import FunctionService
from infless.control.status import FunctionsView
from infless.dataplane.instance import InstanceState
from infless.errors import BadRequest
from infless.gateway.packages import read_capped
from infless.gateway.v2.infer import MODEL_VERSION
from infless.models.zoo import ZOO
from infless.packaging.archive import Limits
from infless.packaging.store import PackageStore

FILE_PREFIX = "file:"


def _json(data: object) -> web.Response:
    return web.Response(body=orjson.dumps(data), content_type="application/json")


async def _optional_json(request: web.Request) -> dict[str, Any]:
    return json_object(await request.read())


def json_object(body: bytes) -> dict[str, Any]:
    """The body as a JSON object; an empty body is an empty object."""
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


def load_files(parameters: dict[str, Any]) -> list[tuple[str, bytes]]:
    """The model files a load request carries: (path, content) from `file:<path>` = base64."""
    files = []
    for key, value in parameters.items():
        if not key.startswith(FILE_PREFIX):
            continue
        if not isinstance(value, str):
            raise BadRequest(f"parameters[{key!r}]: expected the file's content as base64 text")
        try:
            content = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise BadRequest(f"parameters[{key!r}]: not valid base64: {exc}") from None
        files.append((key.removeprefix(FILE_PREFIX), content))
    return files


def load_deployment(name: str, parameters: dict[str, Any], image: str = "") -> dict[str, Any]:
    """The FunctionDeployment a load request means; `image` (stored files) wins over the
    name and over an image in `parameters.config`."""
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
    if image:
        deployment["image"] = image
    return deployment


class RepositoryRoutes:
    def __init__(
        self,
        frontend: FunctionFrontDoor,
        deployed: FunctionsView,
        functions: FunctionService,
        packages: PackageStore,
        limits: Limits,
    ) -> None:
        self._frontend = frontend
        self._deployed = deployed
        self._functions = functions
        self._packages = packages
        self._limits = limits

    async def index(self, request: web.Request) -> web.Response:
        document = await _optional_json(request)
        ready_only = document.get("ready") is True
        entries = []
        deployed = self._deployed.deployed
        for name, function in sorted(deployed.items()):
            state, reason = repository_state(function)
            if ready_only and state != "READY":
                continue
            entries.append(
                {"name": name, "version": MODEL_VERSION, "state": state, "reason": reason}
            )
        if not ready_only:
            failed = self._functions.failed
            for name, failure in sorted(failed.items()):
                entries.append(
                    {
                        "name": name,
                        "version": MODEL_VERSION,
                        "state": "UNAVAILABLE",
                        "reason": failure.error,
                    }
                )
            for name in sorted(set(ZOO) - set(deployed) - set(failed)):
                entries.append({"name": name, "state": "UNAVAILABLE", "reason": "unloaded"})
        return _json(entries)

    async def load(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        body = await read_capped(request, self._limits)
        parameters = _parameters(await asyncio.to_thread(json_object, body))
        files = await asyncio.to_thread(load_files, parameters)
        answer: dict[str, object] = {"name": name, "loaded": True}
        image = ""
        if files:
            stored = await asyncio.to_thread(self._packages.add_files, files, self._limits)
            image = answer["image"] = stored.digest
        deployment = load_deployment(name, parameters, image)
        functions = self._functions
        if name in self._deployed.deployed:
            if "config" in parameters or image:
                await functions.update(deployment)
        else:
            await functions.create(deployment)
        return _json(answer)

    async def unload(self, request: web.Request) -> web.Response:
        _parameters(await _optional_json(request))  # unload_dependents: nothing depends here
        name = request.match_info["name"]
        failed = self._frontend.failed(name)
        name = failed.spec.name if failed is not None else self._frontend.find(name).name
        await self._functions.remove(name)
        return _json({"name": name, "unloaded": True})

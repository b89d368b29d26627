"""The Open Inference Protocol's handlers: server health and metadata, model metadata,
readiness and configuration (inference is `infer`, the model repository `repository`; all
are registered in `gateway.routes`).

A deployed function is a V2 model of the same name with one version, "1"; its metadata comes
from the function package's signature, so it never wakes a scaled-to-zero function. Every
error is JSON `{"error": ...}` (tritonclient reads nothing else), and no response is
compressed. Must not hold request-path logic (that is `infer`) or deploy logic (`repository`).
"""

from __future__ import annotations

import orjson
from aiohttp import web

from infless import __version__
from infless.control.functions import DeployedFunction, FunctionFrontDoor
from infless.control.readiness import Readiness
from infless.errors import WorkerUnavailable
from infless.gateway.system import readiness_answer
from infless.gateway.v2.byte_inputs import BODY_INPUT, BODY_SHAPE, BYTES
from infless.gateway.v2.datatypes import CONFIG_TYPE_PREFIX, v2_datatype
from infless.gateway.v2.infer import MODEL_VERSION, find_model
from infless.types import TensorSpec

PLATFORM_NAME = "infless_pytorch"
EXTENSIONS = ["binary_tensor_data", "model_repository", "model_configuration"]
MODEL_PATHS = ("/v2/models/{name}", "/v2/models/{name}/versions/{version}")


def _json(data: object, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(data), content_type="application/json")


def tensor_metadata(spec: TensorSpec) -> dict[str, object]:
    return {"name": spec.name, "datatype": v2_datatype(spec.dtype), "shape": [-1, *spec.shape]}


BODY_METADATA = {"name": BODY_INPUT, "datatype": BYTES, "shape": [-1, *BODY_SHAPE]}
BODY_CONFIG = {"name": BODY_INPUT, "data_type": "TYPE_STRING", "dims": list(BODY_SHAPE)}


def model_metadata(function: DeployedFunction) -> dict[str, object]:
    """A function with a handler takes request bodies (one BYTES input), others tensors."""
    manifest = function.manifest
    inputs = [tensor_metadata(s) for s in manifest.input_specs]
    return {
        "name": function.spec.name,
        "versions": [MODEL_VERSION],
        "platform": PLATFORM_NAME,
        "inputs": [BODY_METADATA] if manifest.handler is not None else inputs,
        "outputs": [tensor_metadata(s) for s in manifest.output_specs],
    }


def model_config(function: DeployedFunction) -> dict[str, object]:
    """A minimal Triton model configuration (what tritonclient's `get_model_config` reads)."""

    def tensor(spec: TensorSpec) -> dict[str, object]:
        datatype = CONFIG_TYPE_PREFIX + v2_datatype(spec.dtype)
        return {"name": spec.name, "data_type": datatype, "dims": list(spec.shape)}

    manifest = function.manifest
    spec = function.spec
    return {
        "name": spec.name,
        "platform": PLATFORM_NAME,
        "max_batch_size": spec.max_batch,
        "input": (
            [BODY_CONFIG]
            if manifest.handler is not None
            else [tensor(s) for s in manifest.input_specs]
        ),
        "output": [tensor(s) for s in manifest.output_specs],
        "parameters": {"latency_target_ms": {"string_value": f"{spec.slo_ms:g}"}},
    }


def is_ready(function: DeployedFunction) -> bool:
    """Ready: an instance serves now, or the function is scaled to zero and starts one on
    its next request (scale-from-zero, like a Knative activator). Not ready: instances are
    starting, or the last start failed."""
    if function.router.ready_count > 0:
        return True
    return function.desired.count == 0 and function.health.failures == 0


class V2Routes:
    def __init__(self, frontend: FunctionFrontDoor, readiness: Readiness | None = None) -> None:
        self._frontend = frontend
        self._readiness = readiness

    async def server_metadata(self, request: web.Request) -> web.Response:
        return _json({"name": "infless", "version": __version__, "extensions": EXTENSIONS})

    async def live(self, request: web.Request) -> web.Response:
        return _json({"live": True})

    async def ready(self, request: web.Request) -> web.Response:
        """Ready when the functions it started with can answer (`control.readiness`): 200,
        else 503 (tritonclient's `is_server_ready` reads the status)."""
        return readiness_answer(self._readiness)

    async def metadata(self, request: web.Request) -> web.Response:
        return _json(model_metadata(find_model(self._frontend, request)))

    async def model_ready(self, request: web.Request) -> web.Response:
        function = find_model(self._frontend, request)
        if not is_ready(function):
            raise WorkerUnavailable(
                f"model {function.spec.name!r} is not ready: its instances are starting"
                + (f" (last error: {error})" if (error := function.health.last_error) else ""),
                retry_after_s=1.0,
            )
        return _json({"name": function.spec.name, "ready": True})

    async def config(self, request: web.Request) -> web.Response:
        return _json(model_config(find_model(self._frontend, request)))

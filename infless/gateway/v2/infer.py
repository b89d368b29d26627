"""`POST /v2/models/{name}[/versions/{v}]/infer`: decode one V2 request, encode its answer.

The batch dimension is split into samples, each admitted by the function frontend like a
`/function/{name}` request, so V2 rows join the same per-instance batch queues; the
samples' outputs are stacked back in order. A function with a handler takes one BYTES input
instead, a request body per row (`byte_inputs`). Lookup, admission, activity, timeout and
metrics are the frontend's (`dataplane.frontdoor`). Gateway side: numpy only, never torch.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import orjson
from aiohttp import web
from multidict import CIMultiDict

from infless.control.functions import DeployedFunction, FunctionCall, FunctionFrontDoor
from infless.dataplane.request import Array, Outcome, Sample
from infless.errors import (
    FunctionNotFound,
    HandlerRefused,
    InferenceFailed,
    InflessError,
    PayloadTooLarge,
)
from infless.gateway.errors import v2_error_response
from infless.gateway.v2.codec import (
    HEADER_LENGTH,
    bind_bodies,
    bind_inputs,
    encode_infer_response,
    parse_infer_request,
    select_outputs,
)
from infless.modelless.catalog import goals_from_parameters

MODEL_VERSION = "1"  # a function has exactly one version


def check_version(request: web.Request) -> None:
    """A `/versions/{version}` path names the function's only version, else 404."""
    version = request.match_info.get("version")
    if version is not None and version != MODEL_VERSION:
        raise FunctionNotFound(
            f"model {request.match_info['name']!r} has no version {version!r}; its only "
            f"version is {MODEL_VERSION!r}"
        )


def find_model(frontend: FunctionFrontDoor, request: web.Request) -> DeployedFunction:
    """The function a `/v2/models/{name}[/versions/{version}]` path names, or 404."""
    function = frontend.find(request.match_info["name"])
    check_version(request)
    return function


def stack_outputs(name: str, outcomes: Sequence[Outcome]) -> Array:
    for outcome in outcomes:
        answer = outcome.answer
        if answer is not None and answer.status != 200:  # a handler refused this row
            raise HandlerRefused(answer_message(answer.body), answer.status)
    try:
        return np.stack([outcome.outputs[name] for outcome in outcomes])
    except KeyError:
        raise InferenceFailed(f"the worker did not return output {name!r}") from None
    except ValueError:
        raise InferenceFailed(f"rows of output {name!r} came back with different shapes") from None


def answer_message(body: bytes) -> str:
    """The message of a handler's error answer (`{"error": ...}`), else the body as text."""
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body.decode("utf-8", "replace")
    if isinstance(document, dict) and isinstance(document.get("error"), str):
        return str(document["error"])
    return body.decode("utf-8", "replace")


class V2InferHandler:
    def __init__(self, frontend: FunctionFrontDoor) -> None:
        self._frontend = frontend

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        frontend = self._frontend
        call = frontend.open(request.match_info["name"])
        try:
            function = frontend.bind(call, request.content_length, request.headers)
            check_version(request)
            frontend.check_room(call)
            response = await self._infer(call, function, request)
        except InflessError as error:
            response = v2_error_response(error)
        except web.HTTPRequestEntityTooLarge:
            limit = frontend.max_body_bytes
            response = v2_error_response(
                PayloadTooLarge(f"body exceeds gateway.max_body_bytes = {limit}")
            )
        frontend.close(call, response.status)
        return response

    async def _infer(
        self, call: FunctionCall, function: DeployedFunction, request: web.Request
    ) -> web.Response:
        body = await request.read()
        parsed = parse_infer_request(body, request.headers.get(HEADER_LENGTH))
        if call.model is not None:  # model-less: goals may come as request parameters
            goals = goals_from_parameters(parsed.parameters)
            if goals:
                merged = CIMultiDict(request.headers)
                merged.update(goals)  # the body's parameters over the headers
                function = self._frontend.rebind(call, merged)
        samples: list[Sample]
        if function.manifest.handler is not None:  # BYTES rows: one request body each
            samples = list(bind_bodies(parsed.inputs))
        else:
            rows, arrays = bind_inputs(parsed.inputs, function.input_specs)
            samples = [{name: array[row] for name, array in arrays.items()} for row in range(rows)]
        chosen = select_outputs(parsed, [s.name for s in function.manifest.output_specs])
        outcomes = await self._frontend.run(call, samples)
        tensors = [(out, stack_outputs(out, outcomes), binary) for out, binary in chosen]
        variant = None if call.variant is None else {"infless_variant": call.variant}
        payload, header_length = encode_infer_response(
            call.model or function.name, MODEL_VERSION, parsed.id, tensors, variant
        )
        if header_length is None:
            return web.Response(body=payload, content_type="application/json")
        return web.Response(
            body=payload,
            content_type="application/octet-stream",
            headers={HEADER_LENGTH: str(header_length)},
        )

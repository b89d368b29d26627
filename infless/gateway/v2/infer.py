"""`POST /v2/models/{name}[/versions/{v}]/infer`: one V2 request, many samples, one answer.

The batch dimension is split: every row goes through the function's router on its own
(`router.submit`), so it joins the same per-instance batch queues as `/function/{name}`
traffic, and the rows' outputs are stacked back in order. When every queue is full, the
rows already submitted are awaited before the next ones go in; a 429 reaches the caller
only when none of its rows is in flight. Gateway side: numpy only, never torch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
from aiohttp import web

from infless.dataplane.request import Array, Outcome, Pending
from infless.errors import (
    FunctionNotFound,
    GatewayTimeout,
    InferenceFailed,
    InflessError,
    Overloaded,
    PayloadTooLarge,
)
from infless.gateway.errors import v2_error_response
from infless.gateway.invoke import find_function_name
from infless.gateway.v2.codec import (
    HEADER_LENGTH,
    bind_inputs,
    encode_infer_response,
    parse_infer_request,
    select_outputs,
)

if TYPE_CHECKING:
    from infless.app import Platform
    from infless.dataplane.router import FunctionRouter
    from infless.workers.pool import DeployedFunction

MODEL_VERSION = "1"  # a function has exactly one version


def find_model(platform: Platform, request: web.Request) -> DeployedFunction:
    """The function a `/v2/models/{name}[/versions/{version}]` path names, or 404."""
    name = request.match_info["name"]
    function = platform.pool.get(find_function_name(platform, name))
    version = request.match_info.get("version")
    if version is not None and version != MODEL_VERSION:
        raise FunctionNotFound(
            f"model {name!r} has no version {version!r}; its only version is {MODEL_VERSION!r}"
        )
    return function


def _settle(pendings: Sequence[Pending], router: FunctionRouter) -> None:
    """Leave nothing behind: unanswered rows are cancelled, failures marked as retrieved."""
    for pending in pendings:
        future = pending.future
        if not future.done():
            router.forget_waiting(pending)
            future.cancel()
        elif not future.cancelled():
            future.exception()  # retrieved: no "exception was never retrieved" noise


async def run_rows(
    router: FunctionRouter, arrays: Mapping[str, Array], rows: int, timeout_s: float
) -> list[Outcome]:
    """Submit each row, await all of them, answer in order (or raise the first failure)."""
    pendings: list[Pending] = []
    try:
        async with asyncio.timeout(timeout_s):
            for row in range(rows):
                sample = {name: array[row] for name, array in arrays.items()}
                while True:
                    try:
                        pendings.append(router.submit(sample))
                        break
                    except Overloaded:
                        unfinished = [p.future for p in pendings if not p.future.done()]
                        if not unfinished:
                            raise
                        await asyncio.wait(unfinished, return_when=asyncio.FIRST_COMPLETED)
            await asyncio.wait([p.future for p in pendings])
    except TimeoutError:
        raise GatewayTimeout(
            f"function {router.name!r} did not answer {rows} rows within {timeout_s:g} s"
        ) from None
    finally:
        _settle(pendings, router)
    for pending in pendings:
        error = pending.future.exception()
        if error is not None:
            raise error
    return [p.future.result() for p in pendings]


def stack_outputs(name: str, outcomes: Sequence[Outcome]) -> Array:
    try:
        return np.stack([outcome.outputs[name] for outcome in outcomes])
    except KeyError:
        raise InferenceFailed(f"the worker did not return output {name!r}") from None
    except ValueError:
        raise InferenceFailed(f"rows of output {name!r} came back with different shapes") from None


class V2InferHandler:
    def __init__(self, platform: Platform) -> None:
        self._platform = platform
        self._max_body = platform.config.gateway.max_body_bytes
        self._timeout_s = platform.config.gateway.request_timeout_s
        self._metrics = platform.metrics
        self._clock = platform.clock

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        started_s = self._clock.now()
        function: DeployedFunction | None = None
        try:
            function = find_model(self._platform, request)
            response = await self._infer(function, request)
        except InflessError as error:
            response = v2_error_response(error)
        except web.HTTPRequestEntityTooLarge:
            response = v2_error_response(
                PayloadTooLarge(f"body exceeds gateway.max_body_bytes = {self._max_body}")
            )
        if function is not None:
            duration_s = self._clock.now() - started_s
            self._metrics.request_done(function.spec.name, response.status, duration_s)
        return response

    async def _infer(self, function: DeployedFunction, request: web.Request) -> web.Response:
        name = function.spec.name
        self._metrics.request_started(name)
        function.invocations += 1
        length = request.content_length
        if length is not None and length > self._max_body:
            raise PayloadTooLarge(
                f"body of {length} bytes exceeds gateway.max_body_bytes = {self._max_body}"
            )
        body = await request.read()
        parsed = parse_infer_request(body, request.headers.get(HEADER_LENGTH))
        rows, arrays = bind_inputs(parsed.inputs, function.input_specs)
        chosen = select_outputs(parsed, [s.name for s in function.manifest.output_specs])
        activity = function.activity
        activity.arrive(self._clock.now())
        try:
            outcomes = await run_rows(function.router, arrays, rows, self._timeout_s)
        finally:
            activity.finish(self._clock.now())
        for o in outcomes:
            cold = o.cold_start_ms > 0
            self._metrics.served(
                name, o.batch_size, o.queue_ms, o.exec_ms, cold, o.cold_start_ms if cold else None
            )
        tensors = [(out, stack_outputs(out, outcomes), binary) for out, binary in chosen]
        payload, header_length = encode_infer_response(name, MODEL_VERSION, parsed.id, tensors)
        if header_length is None:
            return web.Response(body=payload, content_type="application/json")
        return web.Response(
            body=payload,
            content_type="application/octet-stream",
            headers={HEADER_LENGTH: str(header_length)},
        )

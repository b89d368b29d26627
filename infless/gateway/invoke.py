"""The invoke route `/function/{name}`: the request path, kept as short as we can make it.

Read the body → validate against the function's signature → route to an instance queue →
await the batch result → JSON with timing headers. Errors become JSON with their status.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import TYPE_CHECKING

from aiohttp import web

from infless.errors import FunctionNotFound, GatewayTimeout, InflessError, PayloadTooLarge
from infless.gateway.codec import decode_inputs, encode_outputs
from infless.gateway.errors import error_response

if TYPE_CHECKING:
    from infless.app import Platform

JSON = "application/json"


def find_function_name(platform: Platform, name: str) -> str:
    """`name` or OpenFaaS's `name.namespace` form -> the deployed function's name."""
    if name in platform.pool.functions:
        return name
    base, _, namespace = name.rpartition(".")
    function = platform.pool.functions.get(base)
    if base and function is not None and function.spec.namespace == namespace:
        return base
    raise FunctionNotFound(f"function {name!r} is not deployed; GET /system/functions lists them")


class InvokeHandler:
    def __init__(self, platform: Platform) -> None:
        self._platform = platform
        self._max_body = platform.config.gateway.max_body_bytes
        self._timeout_s = platform.config.gateway.request_timeout_s
        self._metrics = platform.metrics
        self._clock = platform.clock

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        started_s = self._clock.now()
        start_ns = time.time_ns()
        call_id = request.headers.get("X-Call-Id") or str(uuid.uuid4())
        name = request.match_info["name"]
        platform = self._platform
        function = platform.pool.functions.get(name)
        pending = None
        try:
            if function is None:
                function = platform.pool.get(find_function_name(platform, name))
            name = function.spec.name
            self._metrics.request_started(name)
            function.invocations += 1
            length = request.content_length
            if length is not None and length > self._max_body:
                raise PayloadTooLarge(
                    f"body of {length} bytes exceeds gateway.max_body_bytes = {self._max_body}"
                )
            body = await request.read()
            inputs = decode_inputs(body, function.input_specs)
            activity = function.activity
            activity.arrive(started_s)
            try:
                pending = function.router.submit(inputs)
                async with asyncio.timeout(self._timeout_s):
                    outcome = await pending.future
            except TimeoutError:
                if pending is not None:
                    function.router.forget_waiting(pending)
                raise GatewayTimeout(
                    f"function {name!r} did not answer within {self._timeout_s:g} s"
                ) from None
            finally:
                activity.finish(self._clock.now())
        except InflessError as error:
            response = error_response(error)
        except web.HTTPRequestEntityTooLarge:
            response = error_response(
                PayloadTooLarge(f"body exceeds gateway.max_body_bytes = {self._max_body}")
            )
        else:
            cold = outcome.cold_start_ms > 0
            headers = {
                "X-Infless-Instance": outcome.instance_id,
                "X-Infless-Batch-Size": str(outcome.batch_size),
                "X-Infless-Queue-Ms": f"{outcome.queue_ms:.3f}",
                "X-Infless-Exec-Ms": f"{outcome.exec_ms:.3f}",
                "X-Infless-Cold-Start": "true" if cold else "false",
            }
            if cold:
                headers["X-Infless-Cold-Start-Ms"] = f"{outcome.cold_start_ms:.1f}"
            self._metrics.served(
                name,
                outcome.batch_size,
                outcome.queue_ms,
                outcome.exec_ms,
                cold,
                outcome.cold_start_ms if cold else None,
            )
            response = web.Response(
                body=encode_outputs(outcome.outputs), content_type=JSON, headers=headers
            )
        duration_s = self._clock.now() - started_s
        response.headers["X-Call-Id"] = call_id
        response.headers["X-Start-Time"] = str(start_ns)
        response.headers["X-Duration-Seconds"] = f"{duration_s:.6f}"
        if function is not None:
            self._metrics.request_done(name, response.status, duration_s)
        return response

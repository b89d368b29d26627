"""The invoke route `/function/{name}`: decode one JSON sample, encode its answer.

Everything between (lookup, admission, counting, activity, timeout, metrics) is the
function frontend's (`control.frontend`); this module only speaks HTTP around it.
Errors become JSON with their status.
"""

from __future__ import annotations

import uuid

from aiohttp import web

from infless.clock import wall_ns
from infless.control.frontend import FunctionFrontend
from infless.dataplane.request import Outcome
from infless.errors import InflessError, PayloadTooLarge
from infless.gateway.codec import decode_inputs, encode_outputs
from infless.gateway.errors import error_response

JSON = "application/json"


def timing_headers(outcome: Outcome) -> dict[str, str]:
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
    return headers


class InvokeHandler:
    def __init__(self, frontend: FunctionFrontend) -> None:
        self._frontend = frontend

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        start_ns = wall_ns()
        call_id = request.headers.get("X-Call-Id") or str(uuid.uuid4())
        frontend = self._frontend
        call = frontend.open(request.match_info["name"])
        try:
            function = frontend.bind(call, request.content_length)
            inputs = decode_inputs(await request.read(), function.input_specs)
            (outcome,) = await frontend.run(call, [inputs])
        except InflessError as error:
            response = error_response(error)
        except web.HTTPRequestEntityTooLarge:
            limit = frontend.max_body_bytes
            response = error_response(
                PayloadTooLarge(f"body exceeds gateway.max_body_bytes = {limit}")
            )
        else:
            response = web.Response(
                body=encode_outputs(outcome.outputs),
                content_type=JSON,
                headers=timing_headers(outcome),
            )
        duration_s = frontend.close(call, response.status)
        response.headers["X-Call-Id"] = call_id
        response.headers["X-Start-Time"] = str(start_ns)
        response.headers["X-Duration-Seconds"] = f"{duration_s:.6f}"
        return response

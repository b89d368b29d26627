"""The invoke route `/function/{name}`: decode one sample, encode its answer.

A function whose package has a handler takes the body as it came (text, an image, JSON of
any shape), content type and all, and answers what its handler returns. Otherwise the
body's `Content-Type` picks the format: `application/msgpack` and
`application/octet-stream` (raw tensor bytes) are the compact ones (`compact`), anything else
is JSON (`codec`); the answer comes back in the request's format. Everything between
(lookup, admission, counting, activity, timeout, metrics) is the function frontend's
(`control.frontend`); this module only speaks HTTP around it. Errors become JSON with their
status.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Mapping, Sequence

from aiohttp import web

from infless.clock import wall_ns
from infless.control.frontend import FunctionFrontend
from infless.dataplane.request import Array, Outcome, Sample
from infless.errors import InflessError, PayloadTooLarge
from infless.gateway import compact
from infless.gateway.codec import decode_inputs, encode_outputs
from infless.gateway.errors import error_response
from infless.types import TensorSpec
from infless.workers.protocol import RawRequest

JSON = "application/json"
MSGPACK_TYPES = frozenset({compact.MSGPACK, "application/x-msgpack"})


def body_format(content_type: str | None) -> str:
    """The format a request's `Content-Type` names: msgpack, raw, else JSON."""
    if not content_type:
        return JSON
    media = content_type.split(";", 1)[0].strip().lower()
    if media in MSGPACK_TYPES:
        return compact.MSGPACK
    return compact.RAW if media == compact.RAW else JSON


def decode_sample(
    body: bytes, fmt: str, headers: Mapping[str, str], specs: Sequence[TensorSpec]
) -> dict[str, Array]:
    if fmt == compact.MSGPACK:
        return compact.decode_msgpack(body, specs)
    if fmt == compact.RAW:
        return compact.decode_raw(body, headers, specs)
    return decode_inputs(body, specs)


def encode_answer(outputs: Mapping[str, Array], fmt: str) -> web.Response:
    if fmt == compact.RAW and len(outputs) == 1:
        (value,) = outputs.values()
        return web.Response(
            body=compact.encode_raw(value), content_type=compact.RAW,
            headers=compact.raw_headers(value),
        )  # fmt: skip
    if fmt != JSON:
        return web.Response(body=compact.encode_msgpack(outputs), content_type=compact.MSGPACK)
    return web.Response(body=encode_outputs(outputs), content_type=JSON)


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


class CallIds:
    """Unique call ids, cheaply: a random prefix per gateway process and a counter (a fresh
    UUID per request cost ~3 % of the gateway's CPU at high rates)."""

    def __init__(self) -> None:
        self._prefix = uuid.uuid4().hex[:16]
        self._counter = itertools.count(1)

    def next(self) -> str:
        return f"{self._prefix}-{next(self._counter):x}"


class InvokeHandler:
    def __init__(self, frontend: FunctionFrontend) -> None:
        self._frontend = frontend
        self._call_ids = CallIds()

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        start_ns = wall_ns()
        call_id = request.headers.get("X-Call-Id") or self._call_ids.next()
        frontend = self._frontend
        call = frontend.open(request.match_info["name"])
        try:
            function = frontend.bind(call, request.content_length, request.headers)
            frontend.check_room(call)
            content_type = request.headers.get("Content-Type")
            fmt = body_format(content_type)
            body = await request.read()
            sample: Sample
            if function.manifest.handler is not None:  # the body as it came, for the handler
                sample = RawRequest(body, content_type or "application/octet-stream")
            else:
                sample = decode_sample(body, fmt, request.headers, function.input_specs)
            (outcome,) = await frontend.run(call, [sample])
        except InflessError as error:
            response = error_response(error)
        except web.HTTPRequestEntityTooLarge:
            limit = frontend.max_body_bytes
            response = error_response(
                PayloadTooLarge(f"body exceeds gateway.max_body_bytes = {limit}")
            )
        else:
            answer = outcome.answer
            if answer is not None:
                response = web.Response(
                    status=answer.status, body=answer.body, content_type=answer.content_type
                )
            else:
                response = encode_answer(outcome.outputs, fmt)
            response.headers.update(timing_headers(outcome))
            if call.variant is not None:
                response.headers["X-Infless-Variant"] = call.variant
        duration_s = frontend.close(call, response.status)
        response.headers["X-Call-Id"] = call_id
        response.headers["X-Start-Time"] = str(start_ns)
        response.headers["X-Duration-Seconds"] = f"{duration_s:.6f}"
        return response

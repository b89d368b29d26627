"""The invoke route `/function/{name}`: decode one sample, encode its answer.

A function whose package has a handler takes the body as it came (text, an image, JSON of
any shape), content type and all, and answers what its handler returns.

Otherwise the body's `Content-Type` picks the format. `application/msgpack` and
`application/octet-stream` (raw tensor bytes) are the compact ones (`compact`); anything
else is JSON (`codec`). The answer comes back in the request's format.

Everything between (lookup, admission, counting, activity, timeout, metrics) is the
front door's (`dataplane.frontdoor`). This module only turns a request into an
`Answer` (`Invoker`), which the fast path (`gateway.fastpath`) or aiohttp's route
(`InvokeHandler`) writes. Errors become JSON with their status.
"""

from __future__ import annotations

import itertools
import math
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

import orjson
from aiohttp import web

from infless.clock import wall_ns
from infless.control.functions import DeployedFunction, FunctionCall, FunctionFrontDoor
from infless.dataplane.request import Array, Outcome, Pending, Sample
from infless.errors import GatewayTimeout, InflessError, PayloadTooLarge
from infless.gateway import compact
from infless.gateway.codec import decode_inputs, encode_outputs
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


@dataclass(slots=True)
class Answer:
    """One invoke's HTTP answer, whichever server writes it (aiohttp's route, the fast path)."""

    status: int
    body: bytes
    content_type: str
    headers: dict[str, str]


def error_answer(error: InflessError) -> Answer:
    headers = {}
    if error.retry_after_s is not None:
        headers["Retry-After"] = str(max(1, math.ceil(error.retry_after_s)))
    return Answer(error.status, orjson.dumps(error.to_json()), JSON, headers)


def outputs_answer(outputs: Mapping[str, Array], fmt: str) -> Answer:
    if fmt == compact.RAW and len(outputs) == 1:
        (value,) = outputs.values()
        return Answer(200, compact.encode_raw(value), compact.RAW, compact.raw_headers(value))
    if fmt != JSON:
        return Answer(200, compact.encode_msgpack(outputs), compact.MSGPACK, {})
    return Answer(200, encode_outputs(outputs), JSON, {})


@dataclass(slots=True)
class Started:
    """An invoke admitted and on its way (`Invoker.start`): what finishing it needs."""

    call: FunctionCall
    pending: Pending
    fmt: str
    call_id: str
    start_ns: int


class Invoker:
    """`/function/{name}`: one sample in, its answer out, through the function frontend —
    awaited (`invoke`), or started and finished from the sample's done callback (`start`,
    `finish`: no task, no coroutine per request)."""

    def __init__(self, frontend: FunctionFrontDoor) -> None:
        self.frontend = frontend
        self._call_ids = CallIds()

    def _admit(
        self, call: FunctionCall, content_length: int | None, headers: Mapping[str, str]
    ) -> DeployedFunction:
        """The call's function, the call counted, its body length checked, and refused
        (429) at once when no instance could answer it in time."""
        function = self.frontend.bind(call, content_length, headers)
        self.frontend.check_room(call)
        return function

    async def invoke(
        self,
        name: str,
        content_length: int | None,
        headers: Mapping[str, str],
        read_body: Callable[[], Awaitable[bytes]],
    ) -> Answer:
        """The answer to one invoke; `headers` is read case-insensitively, `read_body` is
        awaited only once the call is admitted (a refusal costs no decoding)."""
        start_ns = wall_ns()
        call_id = headers.get("X-Call-Id") or self._call_ids.next()
        call = self.frontend.open(name)
        try:
            function = self._admit(call, content_length, headers)
            content_type = headers.get("Content-Type")
            fmt = body_format(content_type)
            sample = _sample(function, await read_body(), fmt, content_type, headers)
            (outcome,) = await self.frontend.run(call, [sample])
        except InflessError as error:
            answer = error_answer(error)
        else:
            answer = _outcome_answer(outcome, fmt)
        return self._close(call, answer, call_id, start_ns)

    def start(self, name: str, headers: Mapping[str, str], body: bytes) -> Answer | Started:
        """Admit one invoke whose body is at hand: its answer at once (a refusal, an error),
        or the admitted call (`finish` it once its pending sample is done)."""
        start_ns = wall_ns()
        call_id = headers.get("X-Call-Id") or self._call_ids.next()
        call = self.frontend.open(name)
        try:
            function = self._admit(call, len(body), headers)
            content_type = headers.get("Content-Type")
            fmt = body_format(content_type)
            sample = _sample(function, body, fmt, content_type, headers)
            pending = self.frontend.admit(call, sample)
        except InflessError as error:
            return self._close(call, error_answer(error), call_id, start_ns)
        return Started(call, pending, fmt, call_id, start_ns)

    def finish(self, started: Started) -> Answer:
        """The answer of a started invoke whose sample is done."""
        try:
            outcome = self.frontend.answered(started.call, started.pending)
        except InflessError as error:
            answer = error_answer(error)
        else:
            answer = _outcome_answer(outcome, started.fmt)
        return self._close(started.call, answer, started.call_id, started.start_ns)

    def expire(self, started: Started) -> Answer:
        """A started invoke that took longer than the gateway waits: 504, its sample let go."""
        self.frontend.abandoned(started.call, started.pending)
        name = started.call.name
        error = GatewayTimeout(
            f"function {name!r} did not answer within {self.frontend.timeout_s:g} s"
        )
        return self._close(started.call, error_answer(error), started.call_id, started.start_ns)

    def abandon(self, started: Started) -> None:
        """The client left before its answer: let the sample go."""
        self.frontend.abandoned(started.call, started.pending)
        self.frontend.close(started.call, 499)

    def _close(self, call: FunctionCall, answer: Answer, call_id: str, start_ns: int) -> Answer:
        duration_s = self.frontend.close(call, answer.status)
        if call.variant is not None:  # a model-less call's variant, a refusal's too
            answer.headers["X-Infless-Variant"] = call.variant
        answer.headers["X-Call-Id"] = call_id
        answer.headers["X-Start-Time"] = str(start_ns)
        answer.headers["X-Duration-Seconds"] = f"{duration_s:.6f}"
        return answer


def _sample(
    function: DeployedFunction,
    body: bytes,
    fmt: str,
    content_type: str | None,
    headers: Mapping[str, str],
) -> Sample:
    if function.manifest.handler is not None:  # the body as it came, for the handler
        return RawRequest(body, content_type or "application/octet-stream")
    return decode_sample(body, fmt, headers, function.input_specs)


def _outcome_answer(outcome: Outcome, fmt: str) -> Answer:
    handled = outcome.answer
    if handled is not None:
        answer = Answer(handled.status, handled.body, handled.content_type, {})
    else:
        answer = outputs_answer(outcome.outputs, fmt)
    answer.headers.update(timing_headers(outcome))
    return answer


class InvokeHandler:
    """The aiohttp route around `Invoker` (requests the fast path passes on)."""

    def __init__(self, frontend: FunctionFrontDoor) -> None:
        self._invoker = Invoker(frontend)

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        limit = self._invoker.frontend.max_body_bytes

        async def read_body() -> bytes:
            try:
                return await request.read()
            except web.HTTPRequestEntityTooLarge:
                raise PayloadTooLarge(f"body exceeds gateway.max_body_bytes = {limit}") from None

        answer = await self._invoker.invoke(
            request.match_info["name"], request.content_length, request.headers, read_body
        )
        return web.Response(
            status=answer.status,
            body=answer.body,
            content_type=answer.content_type,
            headers=answer.headers,
        )

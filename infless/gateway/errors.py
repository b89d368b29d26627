"""JSON error responses: every error a client sees is `{"error": ..., "code": ...}`."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable

import orjson
from aiohttp import web

from infless.errors import InflessError

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def error_response(error: InflessError) -> web.Response:
    headers = {}
    if error.retry_after_s is not None:
        headers["Retry-After"] = str(max(1, math.ceil(error.retry_after_s)))
    return web.Response(
        status=error.status,
        body=orjson.dumps(error.to_json()),
        content_type="application/json",
        headers=headers,
    )


def json_errors(handler: Handler) -> Handler:
    """Wrap a management handler so InflessError and aiohttp's HTTP errors answer as JSON."""

    async def wrapped(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except InflessError as error:
            return error_response(error)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            return http_error_json(exc)

    return wrapped


# The Open Inference Protocol answers invalid input with 400 (Triton, KServe); infless's own
# routes use 422 for a signature mismatch. Everything else keeps its status.
_V2_STATUS = {422: 400}


def v2_error_response(error: InflessError) -> web.Response:
    """An InflessError as the Open Inference Protocol's `{"error": ...}` body."""
    response = error_response(error)
    response.set_status(_V2_STATUS.get(error.status, error.status))
    return response


def http_error_json(exc: web.HTTPException) -> web.Response:
    """aiohttp's own 4xx/5xx (unknown route, wrong method) as a JSON error body."""
    headers = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else {}
    return web.Response(
        status=exc.status,
        body=orjson.dumps({"error": exc.reason, "code": "http_error"}),
        content_type="application/json",
        headers=headers,
    )


def v2_errors(handler: Handler) -> Handler:
    """Wrap an Open Inference Protocol handler so InflessError answers `{"error": ...}`."""

    async def wrapped(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except InflessError as error:
            return v2_error_response(error)

    return wrapped

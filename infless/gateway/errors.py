"""JSON error responses: every error a client sees is `{"error": ..., "code": ...}`.

`errors_as_json` is the aiohttp application's outermost middleware: whatever a route raises
— an `InflessError`, aiohttp's own HTTP errors (an unknown route, a wrong method, a body
over the limit), a body aiohttp could not decode (a `Content-Encoding` that lies), or a bug
(500, logged) — answers JSON. What aiohttp refuses before any route runs (framing, the
head's limits) never reaches it: the listening socket refuses it first (`gateway.reader`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable

import orjson
from aiohttp import web
from aiohttp.http_exceptions import DecompressSizeError, HttpProcessingError, PayloadEncodingError

from infless.errors import InflessError

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
log = logging.getLogger(__name__)


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


def http_error_json(exc: web.HTTPException, request: web.Request | None = None) -> web.Response:
    """aiohttp's own 4xx/5xx (unknown route, wrong method, body too large) as JSON."""
    headers = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else {}
    message, code = exc.reason, "http_error"
    where = "" if request is None else f"{request.method} {request.path}"
    if exc.status == 404 and request is not None:
        message = f"no route for {where}; GET /openapi.json lists the routes"
        code = "not_found"
    elif exc.status == 405 and request is not None:
        allowed = headers.get("Allow", "")
        message = f"{where}: method {request.method} is not allowed here; use {allowed}"
        code = "method_not_allowed"
    elif exc.status == 413:
        message = f"{where}: {exc.text}; send a smaller body"
        code = "payload_too_large"
    return web.Response(
        status=exc.status,
        body=orjson.dumps({"error": message, "code": code}),
        content_type="application/json",
        headers=headers,
    )


def _json(status: int, message: str, code: str) -> web.Response:
    return web.Response(
        status=status,
        body=orjson.dumps({"error": message, "code": code}),
        content_type="application/json",
    )


def body_error_json(
    exc: HttpProcessingError | web.RequestPayloadError, request: web.Request
) -> web.Response:
    """A body aiohttp could not read: its encoding lies, it inflates past the limit."""
    where = f"{request.method} {request.path}"
    if isinstance(exc, web.RequestPayloadError):  # reading it failed: why is its cause
        cause = exc.__cause__
        if not isinstance(cause, HttpProcessingError):
            return _json(400, f"{where}: unreadable body ({exc})", "bad_request")
        exc = cause
    encoding = request.headers.get("Content-Encoding", "")
    if isinstance(exc, DecompressSizeError):
        return _json(413, f"{where}: the body, decompressed, is too large", "payload_too_large")
    if isinstance(exc, PayloadEncodingError) and encoding:
        return _json(
            400,
            f"Content-Encoding: {encoding}, but the body is not {encoding} data; send it "
            "compressed as it says, or without the header",
            "bad_content_encoding",
        )
    return _json(400, f"{where}: malformed request ({exc.message})", "bad_request")


@web.middleware
async def errors_as_json(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every error of every route as JSON `{"error", "code"}` (see the module docstring)."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return http_error_json(exc, request)
    except InflessError as error:
        return error_response(error)
    except (HttpProcessingError, web.RequestPayloadError) as exc:
        return body_error_json(exc, request)
    except ConnectionError:
        raise  # the client is gone: nobody reads an answer
    except Exception:
        log.exception("%s %s failed", request.method, request.path)
        return _json(
            500,
            f"{request.method} {request.path} failed inside the gateway; its log says why",
            "internal",
        )


def v2_errors(handler: Handler) -> Handler:
    """Wrap an Open Inference Protocol handler so InflessError answers `{"error": ...}`."""

    async def wrapped(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except InflessError as error:
            return v2_error_response(error)

    return wrapped

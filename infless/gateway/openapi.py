"""The gateway's OpenAPI 3 document (`GET /openapi.json`): every route it serves, in one place.

One table (`ROUTES`) lists each route with its documented statuses; a unit test checks the
table against the routes the application registers, so a route without a description
fails the build, and the fuzz test accepts a 5xx only where this document names it. The
bodies the routes refer to are `openapi_schemas`. Pure data: no I/O, no knowledge of the
platform's state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from infless import __version__
from infless.gateway.openapi_schemas import (
    BINARY,
    BOOL,
    INT,
    SCHEMAS,
    STR,
    TIME,
    Schema,
    arr,
    fields,
    obj,
    ref,
)

JSON = "application/json"


def _path(name: str) -> Schema:
    return {"name": name, "in": "path", "required": True, "schema": STR}


def _query(name: str, schema: Schema, description: str, required: bool = False) -> Schema:
    return {
        "name": name,
        "in": "query",
        "required": required,
        "schema": schema,
        "description": description,
    }


ERRORS = {
    400: "Bad request: malformed body, or input that does not fit the signature",
    401: 'Invalid credentials (WWW-Authenticate: Basic/Bearer realm="Restricted")',
    404: "Unknown function, model or version",
    409: "The function (or secret) already exists",
    413: "Body larger than gateway.max_body_bytes (packages: gateway.max_package_bytes)",
    415: "A Content-Type the route does not read",
    422: "Input does not fit the function's signature; an invalid or unsafe package; a "
    "package's requirements are not installed",
    429: "Every instance queue is full (Retry-After)",
    500: "The model raised on this batch",
    503: "No instance can serve: starting failed, the worker died twice, not ready "
    "(Retry-After), or the function failed to deploy (function_failed); /ui/events: "
    "ui.max_viewers pages are open",
    504: "No answer within gateway.request_timeout_s",
}
# Who may call: "" open, "management" basic auth when on, "invoke" bearer token when set.
SECURITY: dict[str, list[dict[str, list[str]]]] = {
    "management": [{"basicAuth": []}, {}],
    "invoke": [{"bearerAuth": []}, {"basicAuth": []}, {}],
}
_INFER_BODY: dict[str, Schema] = {
    JSON: {"schema": ref("InferenceRequest")},
    "application/octet-stream": {
        "schema": BINARY,
        "description": "a JSON header of Inference-Header-Content-Length bytes, then the "
        "binary inputs in order",
    },
}
_INFER_OK: dict[str, Schema] = {
    JSON: {"schema": ref("InferenceResponse")},
    "application/octet-stream": {"schema": BINARY},
}
_HEADER_LENGTH = {
    "name": "Inference-Header-Content-Length",
    "in": "header",
    "required": False,
    "schema": INT,
}
_NAMESPACE = _query("namespace", STR, "only this namespace")
_FN = _query("function", STR, "only this function's instances")
_INSTANCE_STATE = _query(
    "state", STR, "live (default), idle (workers kept for transformation) or all"
)
_READY = fields("name ready:bool")
_LOG_QUERY = (
    _query("name", STR, "function name", required=True),
    _query("instance", STR, "only this instance"),
    _query("tail", INT, "only the last N lines (<= 0: all)"),
    _query("follow", BOOL, "keep streaming new lines"),
    _query("since", TIME, "only lines from this time on (RFC 3339)"),
)


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    summary: str
    ok: int
    ok_content: dict[str, Schema] | None  # None: no body
    errors: tuple[int, ...] = ()
    security: str = ""
    params: tuple[Schema, ...] = ()
    body: dict[str, Schema] | None = None
    body_required: bool = True
    other_ok: tuple[tuple[int, str], ...] = ()  # further success statuses: (code, meaning)

    def operation(self) -> dict[str, Any]:
        tag = self.path.split("/")[1] or "root"
        params = [_path(p[1:-1]) for p in self.path.split("/") if p.startswith("{")]
        success: Schema = {"description": self.summary}
        if self.ok_content is not None:
            success["content"] = self.ok_content
        responses: dict[str, Any] = {str(self.ok): success}
        for code, meaning in self.other_ok:
            responses[str(code)] = {**success, "description": meaning}
        for code in self.errors:
            error = {JSON: {"schema": ref("Error")}}
            responses[str(code)] = {"description": ERRORS[code], "content": error}
        op: dict[str, Any] = {"summary": self.summary, "tags": [tag], "responses": responses}
        if params or self.params:
            op["parameters"] = [*params, *self.params]
        if self.body is not None:
            op["requestBody"] = {"required": self.body_required, "content": self.body}
        if self.security:
            op["security"] = SECURITY[self.security]
        return op


def _j(schema: Schema) -> dict[str, Schema]:
    return {JSON: {"schema": schema}}


_STATUS = ref("FunctionStatus")
_DEPLOY = _j(ref("FunctionDeployment"))
_REPO = _j(ref("RepositoryRequest"))
_MODEL_BASES = ("/v2/models/{name}", "/v2/models/{name}/versions/{version}")
_ARCHIVE: dict[str, Schema] = {
    media: {"schema": BINARY}
    for media in ("application/gzip", "application/x-tar+gzip", "application/octet-stream")
}


def _mg(
    method: str, path: str, summary: str, ok: int, schema: Schema | None, *errors: int, **kw: Any
) -> Route:
    """A management route: basic auth when on, JSON answers, 401 among its errors."""
    content = None if schema is None else _j(schema)
    return Route(method, path, summary, ok, content, (401, *errors), "management", **kw)


def _v2(method: str, path: str, summary: str, schema: Schema, *errors: int, **kw: Any) -> Route:
    """A model route: the invoke token when set."""
    return Route(method, path, summary, 200, _j(schema), (401, 404, *errors), "invoke", **kw)


_PAGE = {"text/html": {"schema": STR}}
_ASSET = {"text/javascript": {"schema": STR}, "text/css": {"schema": STR}}
_EVENTS = {"text/event-stream": {"schema": STR}}
_BOARD = "The live board: servers, instances and each function's SLO (a page)"
_ASSETS = "The board's script and styles"
_STREAM = "Server-sent events: the series so far, then one snapshot per ui.interval_s"
_READINESS = _j(obj(ready=BOOL, starting=arr(STR), failed=obj()))

ROUTES: list[Route] = [
    Route("get", "/ui", _BOARD, 200, _PAGE, (401,), "management"),
    Route("get", "/ui/", _BOARD, 200, _PAGE, (401,), "management"),
    Route("get", "/ui/static/{name}", _ASSETS, 200, _ASSET, (401, 404), "management"),
    Route("get", "/ui/events", _STREAM, 200, _EVENTS, (401, 503), "management"),
    _mg("get", "/ui/function/{name}", "A function's detail on the board", 200, obj(), 404),
    Route("get", "/healthz", "Liveness: OK", 200, {"text/plain": {"schema": STR}}),
    Route("get", "/readyz", "Readiness: the startup functions settled", 200, _READINESS, (503,)),
    Route("get", "/metrics", "Prometheus text format", 200, {"text/plain": {"schema": STR}}),
    Route("get", "/openapi.json", "This document", 200, _j(obj())),
    _mg("get", "/system/info", "Versions", 200, ref("GatewayInfo")),
    _mg("get", "/system/functions", "Functions", 200, arr(_STATUS), params=(_NAMESPACE,)),
    _mg("post", "/system/functions", "Deploy", 202, _STATUS, 400, 409, body=_DEPLOY),
    _mg("put", "/system/functions", "Update (404: absent)", 202, _STATUS, 400, 404, body=_DEPLOY),
    _mg(
        "delete",
        "/system/functions",
        "Remove a function",
        202,
        None,
        400,
        404,
        body=_j(ref("DeleteFunctionRequest")),
    ),
    _mg("get", "/system/function/{name}", "One function", 200, _STATUS, 404),
    _mg(
        "post",
        "/system/scale-function/{name}",
        "Set a function's instance count",
        202,
        _STATUS,
        400,
        404,
        body=_j(ref("ScaleServiceRequest")),
    ),
    _mg(
        "get",
        "/system/instances",
        "Instances",
        200,
        arr(ref("Instance")),
        params=(_FN, _INSTANCE_STATE),
    ),
    _mg("get", "/system/templates", "Per-model template processes", 200, arr(ref("Template"))),
    _mg("get", "/system/servers", "The servers instances run on", 200, arr(ref("Server"))),
    _mg(
        "post",
        "/system/packages",
        "Upload a function package (a tar.gz of its directory); deploy it as image sha256:<hex>",
        201,
        ref("StoredPackage"),
        400,
        413,
        415,
        422,
        body=_ARCHIVE,
        other_ok=((200, "The package was stored already"),),
    ),
    _mg(
        "get",
        "/system/packages/{digest}",
        "A stored package's manifest (HEAD: is it stored?)",
        200,
        ref("PackageManifest"),
        400,
        404,
    ),
    _mg(
        "post",
        "/system/register",
        "Register a model: its variants are generated and profiled in the background",
        202,
        ref("RegisteredModel"),
        400,
        409,
        413,
        body=_j(ref("Registration")),
    ),
    _mg("get", "/system/models", "Registered models", 200, arr(ref("RegisteredModel"))),
    _mg(
        "get",
        "/system/variants/{model}",
        "A registered model, its variants' profiles and live states",
        200,
        ref("ModelVariants"),
        404,
    ),
    _mg(
        "post",
        "/system/models/{model}/apps",
        "Add or replace an application's goals",
        201,
        ref("Application"),
        400,
        404,
        body=_j(ref("Application")),
    ),
    _mg("delete", "/system/models/{model}", "Remove a registered model", 202, None, 404),
    _mg("get", "/system/secrets", "Secret names (never values)", 200, arr(ref("Secret"))),
    *(
        _mg(method, "/system/secrets", summary, ok, None, 400, *errors, body=_j(ref("Secret")))
        for method, summary, ok, errors in (
            ("post", "Create a secret (value, or rawValue base64)", 201, (409,)),
            ("put", "Replace a secret's value", 200, (404,)),
            ("delete", "Remove a secret (only name is read)", 200, (404,)),
        )
    ),
    Route(
        "get",
        "/system/logs",
        "Function logs, one LogEntry JSON object per line",
        200,
        {"application/x-ndjson": {"schema": ref("LogEntry")}},
        (400, 401, 404),
        "management",
        _LOG_QUERY,
    ),
    *(
        Route(
            "post",
            path,
            "Infer one sample (any method is accepted)",
            200,
            _j(obj(outputs={})),
            (400, 401, 404, 413, 422, 429, 500, 503, 504),
            "invoke",
            body=_j(ref("Sample")),
        )
        for path in ("/function/{name}", "/function/{name}/{path}")
    ),
    Route("get", "/v2", "Server metadata", 200, _j(ref("ServerMetadata"))),
    Route("get", "/v2/health/live", "Live", 200, _j(obj(live=BOOL))),
    Route(
        "get", "/v2/health/ready", "Ready: the startup functions settled", 200, _READINESS, (503,)
    ),
    *(
        route
        for base in _MODEL_BASES
        for route in (
            _v2("get", base, "Model metadata", ref("ModelMetadata")),
            _v2("get", f"{base}/ready", "Ready (scaled to zero counts)", _READY, 503),
            _v2("get", f"{base}/config", "Triton model configuration", obj()),
            Route(
                "post",
                f"{base}/infer",
                "Inference; the rows of the batch dimension join the batch queues",
                200,
                _INFER_OK,
                (400, 401, 404, 413, 429, 500, 503, 504),
                "invoke",
                (_HEADER_LENGTH,),
                _INFER_BODY,
            ),
        )
    ),
    _mg(
        "post",
        "/v2/repository/index",
        "Deployed functions and loadable zoo models",
        200,
        ref("RepositoryIndex"),
        400,
        body=_REPO,
        body_required=False,
    ),
    _mg(
        "post",
        "/v2/repository/models/{name}/load",
        "Deploy (a zoo model name deploys that model with default settings; `file:` "
        "parameters deploy the package they form)",
        200,
        fields("name loaded:bool image"),
        400,
        409,
        413,
        body=_REPO,
        body_required=False,
    ),
    _mg(
        "post",
        "/v2/repository/models/{name}/unload",
        "Remove the function",
        200,
        fields("name unloaded:bool"),
        400,
        404,
        body=_REPO,
        body_required=False,
    ),
]


def openapi_document() -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for route in ROUTES:
        paths.setdefault(route.path, {})[route.method] = route.operation()
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "infless gateway",
            "version": __version__,
            "description": "The OpenFaaS gateway API, the Open Inference Protocol (KServe v2) "
            "with Triton's binary tensor data extension, and infless's own routes. Every error "
            'is JSON {"error": ..., "code": ...}.',
        },
        "paths": paths,
        "components": {
            "schemas": SCHEMAS,
            "securitySchemes": {
                "basicAuth": {"type": "http", "scheme": "basic"},
                "bearerAuth": {"type": "http", "scheme": "bearer"},
            },
        },
    }

"""The gateway's OpenAPI 3 document (`GET /openapi.json`): every route it serves, in one place.

One table (`ROUTES`) lists each route with its documented statuses; a unit test checks the
table against the routes the application registers, so a route without a description
fails the build, and the fuzz test accepts a 5xx only where this document names it. The
bodies the routes refer to are `openapi_schemas` (requests and the other answers) and
`openapi_views` (the status answers, generated from the view structs). Pure data: no I/O,
no knowledge of the platform's state.
"""

from __future__ import annotations

from typing import Any

from infless import __version__
from infless.control.views import (
    FunctionStatusView,
    InstanceStatusView,
    ReadinessView,
    ServerStatusView,
)
from infless.gateway.openapi_route import (
    JSON,
    Route,
    as_json,
    board_page,
    management,
    model,
    query,
)
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
from infless.gateway.openapi_views import view_ref, view_schemas
from infless.modelless.views import ModelView
from infless.registry.variants import RegisteredModel
from infless.workers.status import IdleWorkerView, StandbyWorkerView, TemplateView

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
_NAMESPACE = query("namespace", STR, "only this namespace")
_FN = query("function", STR, "only this function's instances")
_INSTANCE_STATE = query(
    "state", STR, "live (default), idle (workers kept for transformation) or all"
)
_READY = fields("name ready:bool")
_LOG_QUERY = (
    query("name", STR, "function name", required=True),
    query("instance", STR, "only this instance"),
    query("tail", INT, "only the last N lines (<= 0: all)"),
    query("follow", BOOL, "keep streaming new lines"),
    query("since", TIME, "only lines from this time on (RFC 3339)"),
)


_STATUS = view_ref(FunctionStatusView)
_DEPLOY = as_json(ref("FunctionDeployment"))
_REPO = as_json(ref("RepositoryRequest"))
_MODEL_BASES = ("/v2/models/{name}", "/v2/models/{name}/versions/{version}")
_ARCHIVE: dict[str, Schema] = {
    media: {"schema": BINARY}
    for media in ("application/gzip", "application/x-tar+gzip", "application/octet-stream")
}


_PAGE = {"text/html": {"schema": STR}}
_ASSET = {"text/javascript": {"schema": STR}, "text/css": {"schema": STR}}
_EVENTS = {"text/event-stream": {"schema": STR}}
_BOARD = "The live board: servers, instances and each function's SLO (a page)"
_ASSETS = "The board's script and styles"
_STREAM = "Server-sent events: the series so far, then one snapshot per ui.interval_s"
_READINESS = as_json(view_ref(ReadinessView))
# a live instance, or a worker kept without one (`state=idle`)
_INSTANCE = {
    "anyOf": [view_ref(v) for v in (InstanceStatusView, IdleWorkerView, StandbyWorkerView)]
}

ROUTES: list[Route] = [
    board_page("/ui", _BOARD, _PAGE),
    board_page("/ui/", _BOARD, _PAGE),
    board_page("/ui/static/{name}", _ASSETS, _ASSET, 404),
    board_page("/ui/events", _STREAM, _EVENTS, 503),
    management("get", "/ui/function/{name}", "A function's detail on the board", 200, obj(), 404),
    Route("get", "/healthz", "Liveness: OK", 200, {"text/plain": {"schema": STR}}),
    Route("get", "/readyz", "Readiness: the startup functions settled", 200, _READINESS, (503,)),
    Route("get", "/metrics", "Prometheus text format", 200, {"text/plain": {"schema": STR}}),
    Route("get", "/openapi.json", "This document", 200, as_json(obj())),
    management("get", "/system/info", "Versions", 200, ref("GatewayInfo")),
    management("get", "/system/functions", "Functions", 200, arr(_STATUS), params=(_NAMESPACE,)),
    management("post", "/system/functions", "Deploy", 202, _STATUS, 400, 409, body=_DEPLOY),
    management(
        "put", "/system/functions", "Update (404: absent)", 202, _STATUS, 400, 404, body=_DEPLOY
    ),
    management(
        "delete",
        "/system/functions",
        "Remove a function",
        202,
        None,
        400,
        404,
        body=as_json(ref("DeleteFunctionRequest")),
    ),
    management("get", "/system/function/{name}", "One function", 200, _STATUS, 404),
    management(
        "post",
        "/system/scale-function/{name}",
        "Set a function's instance count",
        202,
        _STATUS,
        400,
        404,
        body=as_json(ref("ScaleServiceRequest")),
    ),
    management(
        "get",
        "/system/instances",
        "Instances",
        200,
        arr(_INSTANCE),
        params=(_FN, _INSTANCE_STATE),
    ),
    management(
        "get", "/system/templates", "Per-model template processes", 200, arr(view_ref(TemplateView))
    ),
    management(
        "get",
        "/system/servers",
        "The servers instances run on",
        200,
        arr(view_ref(ServerStatusView)),
    ),
    management(
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
    management(
        "get",
        "/system/packages/{digest}",
        "A stored package's manifest (HEAD: is it stored?)",
        200,
        ref("PackageManifest"),
        400,
        404,
    ),
    management(
        "post",
        "/system/register",
        "Register a model: its variants are generated and profiled in the background",
        202,
        view_ref(RegisteredModel),
        400,
        409,
        413,
        body=as_json(ref("Registration")),
    ),
    management("get", "/system/models", "Registered models", 200, arr(view_ref(RegisteredModel))),
    management(
        "get",
        "/system/variants/{model}",
        "A registered model, its variants' profiles and live states",
        200,
        view_ref(ModelView),
        404,
    ),
    management(
        "post",
        "/system/models/{model}/apps",
        "Add or replace an application's goals",
        201,
        ref("Application"),
        400,
        404,
        body=as_json(ref("Application")),
    ),
    management("delete", "/system/models/{model}", "Remove a registered model", 202, None, 404),
    management("get", "/system/secrets", "Secret names (never values)", 200, arr(ref("Secret"))),
    *(
        management(
            method, "/system/secrets", summary, ok, None, 400, *errors, body=as_json(ref("Secret"))
        )
        for method, summary, ok, errors in (
            ("post", "Create a secret (value, or rawValue base64)", 201, (409,)),
            ("put", "Replace a secret's value", 200, (404,)),
            ("delete", "Remove a secret (only name is read)", 200, (404,)),
        )
    ),
    Route(
        method="get",
        path="/system/logs",
        summary="Function logs, one LogEntry JSON object per line",
        ok=200,
        ok_content={"application/x-ndjson": {"schema": ref("LogEntry")}},
        errors=(400, 401, 404),
        security="management",
        params=_LOG_QUERY,
    ),
    *(
        Route(
            method="post",
            path=path,
            summary="Infer one sample (any method is accepted)",
            ok=200,
            ok_content=as_json(obj(outputs={})),
            errors=(400, 401, 404, 413, 422, 429, 500, 503, 504),
            security="invoke",
            body=as_json(ref("Sample")),
        )
        for path in ("/function/{name}", "/function/{name}/{path}")
    ),
    Route("get", "/v2", "Server metadata", 200, as_json(ref("ServerMetadata"))),
    Route("get", "/v2/health/live", "Live", 200, as_json(obj(live=BOOL))),
    Route(
        "get", "/v2/health/ready", "Ready: the startup functions settled", 200, _READINESS, (503,)
    ),
    *(
        route
        for base in _MODEL_BASES
        for route in (
            model("get", base, "Model metadata", ref("ModelMetadata")),
            model("get", f"{base}/ready", "Ready (scaled to zero counts)", _READY, 503),
            model("get", f"{base}/config", "Triton model configuration", obj()),
            Route(
                method="post",
                path=f"{base}/infer",
                summary="Inference; the rows of the batch dimension join the batch queues",
                ok=200,
                ok_content=_INFER_OK,
                errors=(400, 401, 404, 413, 429, 500, 503, 504),
                security="invoke",
                params=(_HEADER_LENGTH,),
                body=_INFER_BODY,
            ),
        )
    ),
    management(
        "post",
        "/v2/repository/index",
        "Deployed functions and loadable zoo models",
        200,
        ref("RepositoryIndex"),
        400,
        body=_REPO,
        body_required=False,
    ),
    management(
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
    management(
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
            "schemas": {**SCHEMAS, **view_schemas()},
            "securitySchemes": {
                "basicAuth": {"type": "http", "scheme": "basic"},
                "bearerAuth": {"type": "http", "scheme": "bearer"},
            },
        },
    }

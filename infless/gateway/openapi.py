"""The gateway's OpenAPI 3 document (`GET /openapi.json`): every route it serves, in one place.

One table (`ROUTES`) lists each route with its documented statuses; a unit test checks the
table against the routes the application registers, so a route without a description
fails the build, and the fuzz test accepts a 5xx only where this document names it. Pure
data: no I/O, no knowledge of the platform's state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from infless import __version__

JSON = "application/json"
Schema = dict[str, Any]

_STR: Schema = {"type": "string"}
_INT: Schema = {"type": "integer"}
_NUM: Schema = {"type": "number"}
_BOOL: Schema = {"type": "boolean"}
_TIME: Schema = {"type": "string", "format": "date-time"}
_BINARY: Schema = {"type": "string", "format": "binary"}
_STRING_MAP: Schema = {"type": "object", "additionalProperties": _STR}
DATATYPES = ["FP32", "FP16", "FP64", "INT64", "INT32", "INT16", "INT8", "UINT8", "BOOL"]


def _ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def _obj(required: list[str] | None = None, **properties: Schema) -> Schema:
    schema: Schema = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


def _arr(items: Schema) -> Schema:
    return {"type": "array", "items": items}


def _path(name: str) -> Schema:
    return {"name": name, "in": "path", "required": True, "schema": _STR}


def _query(name: str, schema: Schema, description: str, required: bool = False) -> Schema:
    return {
        "name": name,
        "in": "query",
        "required": required,
        "schema": schema,
        "description": description,
    }


_TYPES: dict[str, Schema] = {
    "str": _STR,
    "int": _INT,
    "num": _NUM,
    "bool": _BOOL,
    "time": _TIME,
    "map": _STRING_MAP,
    "strs": _arr(_STR),
    "ints": _arr(_INT),
    "any": {},
}


def _fields(spec: str, **extra: Schema) -> Schema:
    """A compact object schema: "name! count:int tags:strs" (! = required, default type str)."""
    properties: dict[str, Schema] = {}
    required: list[str] = []
    for token in spec.split():
        name, _, kind = token.partition(":")
        if name.endswith("!"):
            name = name[:-1]
            required.append(name)
        properties[name] = _TYPES[kind or "str"]
    return _obj(required, **properties, **extra)


SCHEMAS: dict[str, Schema] = {
    "Error": _fields("error! code"),
    "FunctionResources": _fields("memory cpu"),
    "FunctionDeployment": _fields(
        "service! image! namespace envProcess envVars:map constraints:strs secrets:strs "
        "labels:map annotations:map readOnlyRootFilesystem:bool",
        limits=_ref("FunctionResources"),
        requests=_ref("FunctionResources"),
    ),
    "FunctionStatus": _fields(
        "name! image! namespace envProcess envVars:map labels:map annotations:map secrets:strs "
        "invocationCount:num replicas:int availableReplicas:int createdAt:time "
        "latencyTargetMs:num maxBatch:int coldStarts:int state lastError",
        limits=_ref("FunctionResources"),
        signature=_obj(inputs=_arr(_obj()), outputs=_arr(_obj())),
    ),
    "Secret": _fields("name! namespace value rawValue"),
    "DeleteFunctionRequest": _fields("functionName! namespace"),
    "ScaleServiceRequest": _fields("serviceName namespace replicas!:int"),
    "GatewayInfo": _fields(
        "arch!",
        provider=_fields("provider orchestration", version=_fields("sha release")),
        version=_fields("sha release commit_message"),
    ),
    "Instance": _fields("id! function! batchSize:int cpus:int pid:int state! served:int template"),
    "Template": _fields("id! pid!:int tenant! package! alive:bool instances:strs startMs:num"),
    "LogEntry": _fields("name! namespace instance timestamp!:time text!"),
    "Sample": _fields("inputs!:any"),
    "ServerMetadata": _fields("name! version! extensions!:strs"),
    "TensorMetadata": _fields("name! datatype! shape!:ints"),
    "ModelMetadata": _fields(
        "name! versions:strs platform!",
        inputs=_arr(_ref("TensorMetadata")),
        outputs=_arr(_ref("TensorMetadata")),
    ),
    "RequestInput": _fields(
        "name! shape!:ints data:any",
        datatype={"type": "string", "enum": DATATYPES},
        parameters=_fields("binary_data_size:int"),
    ),
    "RequestOutput": _fields("name!", parameters=_fields("binary_data:bool")),
    "InferenceRequest": _fields(
        "id",
        parameters=_fields("binary_data_output:bool"),
        inputs=_arr(_ref("RequestInput")),
        outputs=_arr(_ref("RequestOutput")),
    ),
    "ResponseOutput": _fields(
        "name! shape!:ints datatype! data:any", parameters=_fields("binary_data_size:int")
    ),
    "InferenceResponse": _fields(
        "model_name! model_version id", outputs=_arr(_ref("ResponseOutput"))
    ),
    "StoredPackage": _fields("digest! image! name! bytes!:int"),
    "Registration": _fields(
        "model! image! sloMs!:num maxBatch:int metric variants:strs cpus:ints",
        validation=_fields("generate:int filename data"),
        apps=_arr(_ref("Application")),
    ),
    "Application": _fields("id! latencyMs:num minAccuracy:num costWeight:num"),
    "RegisteredModel": _fields(
        "model! image! slo_ms!:num max_batch!:int metric status! error registered_at "
        "generation_s:num"
    ),
    "ModelVariants": _fields(
        "model! status! target switches:int", apps=_obj(), variants=_arr(_obj())
    ),
    "PackageManifest": _fields(
        "name! architecture! format weights_file program_file handler digest requirements:strs",
        inputs=_arr(_obj()),
        outputs=_arr(_obj()),
    ),
    "RepositoryIndex": _arr(_fields("name! version state! reason")),
    "RepositoryRequest": _fields(
        "ready:bool",
        parameters={
            "type": "object",
            "additionalProperties": True,
            "description": "load: `config` = a FunctionDeployment serialized as a JSON string; "
            "`file:<path>` = a file of a function package, base64 (the package is stored and "
            "deployed by its digest)",
        },
    ),
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
    503: "No instance can serve: starting failed, the worker died twice, or not ready "
    "(Retry-After)",
    504: "No answer within gateway.request_timeout_s",
}
# Who may call: "" open, "management" basic auth when on, "invoke" bearer token when set.
SECURITY: dict[str, list[dict[str, list[str]]]] = {
    "management": [{"basicAuth": []}, {}],
    "invoke": [{"bearerAuth": []}, {"basicAuth": []}, {}],
}
_INFER_BODY: dict[str, Schema] = {
    JSON: {"schema": _ref("InferenceRequest")},
    "application/octet-stream": {
        "schema": _BINARY,
        "description": "a JSON header of Inference-Header-Content-Length bytes, then the "
        "binary inputs in order",
    },
}
_INFER_OK: dict[str, Schema] = {
    JSON: {"schema": _ref("InferenceResponse")},
    "application/octet-stream": {"schema": _BINARY},
}
_HEADER_LENGTH = {
    "name": "Inference-Header-Content-Length",
    "in": "header",
    "required": False,
    "schema": _INT,
}
_NAMESPACE = _query("namespace", _STR, "only this namespace")
_FN = _query("function", _STR, "only this function's instances")
_READY = _fields("name ready:bool")
_LOG_QUERY = (
    _query("name", _STR, "function name", required=True),
    _query("instance", _STR, "only this instance"),
    _query("tail", _INT, "only the last N lines (<= 0: all)"),
    _query("follow", _BOOL, "keep streaming new lines"),
    _query("since", _TIME, "only lines from this time on (RFC 3339)"),
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
            error = {JSON: {"schema": _ref("Error")}}
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


_STATUS = _ref("FunctionStatus")
_DEPLOY = _j(_ref("FunctionDeployment"))
_REPO = _j(_ref("RepositoryRequest"))
_MODEL_BASES = ("/v2/models/{name}", "/v2/models/{name}/versions/{version}")
_ARCHIVE: dict[str, Schema] = {
    media: {"schema": _BINARY}
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


ROUTES: list[Route] = [
    Route("get", "/healthz", "Gateway health: OK", 200, {"text/plain": {"schema": _STR}}),
    Route("get", "/metrics", "Prometheus text format", 200, {"text/plain": {"schema": _STR}}),
    Route("get", "/openapi.json", "This document", 200, _j(_obj())),
    _mg("get", "/system/info", "Versions", 200, _ref("GatewayInfo")),
    _mg("get", "/system/functions", "Functions", 200, _arr(_STATUS), params=(_NAMESPACE,)),
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
        body=_j(_ref("DeleteFunctionRequest")),
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
        body=_j(_ref("ScaleServiceRequest")),
    ),
    _mg("get", "/system/instances", "Instances", 200, _arr(_ref("Instance")), params=(_FN,)),
    _mg("get", "/system/templates", "Per-model template processes", 200, _arr(_ref("Template"))),
    _mg(
        "post",
        "/system/packages",
        "Upload a function package (a tar.gz of its directory); deploy it as image sha256:<hex>",
        201,
        _ref("StoredPackage"),
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
        _ref("PackageManifest"),
        400,
        404,
    ),
    _mg(
        "post",
        "/system/register",
        "Register a model: its variants are generated and profiled in the background",
        202,
        _ref("RegisteredModel"),
        400,
        409,
        413,
        body=_j(_ref("Registration")),
    ),
    _mg("get", "/system/models", "Registered models", 200, _arr(_ref("RegisteredModel"))),
    _mg(
        "get",
        "/system/variants/{model}",
        "A registered model, its variants' profiles and live states",
        200,
        _ref("ModelVariants"),
        404,
    ),
    _mg(
        "post",
        "/system/models/{model}/apps",
        "Add or replace an application's goals",
        201,
        _ref("Application"),
        400,
        404,
        body=_j(_ref("Application")),
    ),
    _mg("delete", "/system/models/{model}", "Remove a registered model", 202, None, 404),
    _mg("get", "/system/secrets", "Secret names (never values)", 200, _arr(_ref("Secret"))),
    *(
        _mg(method, "/system/secrets", summary, ok, None, 400, *errors, body=_j(_ref("Secret")))
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
        {"application/x-ndjson": {"schema": _ref("LogEntry")}},
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
            _j(_obj(outputs={})),
            (400, 401, 404, 413, 422, 429, 500, 503, 504),
            "invoke",
            body=_j(_ref("Sample")),
        )
        for path in ("/function/{name}", "/function/{name}/{path}")
    ),
    Route("get", "/v2", "Server metadata", 200, _j(_ref("ServerMetadata"))),
    Route("get", "/v2/health/live", "Live", 200, _j(_obj(live=_BOOL))),
    Route("get", "/v2/health/ready", "Ready", 200, _j(_obj(ready=_BOOL))),
    *(
        route
        for base in _MODEL_BASES
        for route in (
            _v2("get", base, "Model metadata", _ref("ModelMetadata")),
            _v2("get", f"{base}/ready", "Ready (scaled to zero counts)", _READY, 503),
            _v2("get", f"{base}/config", "Triton model configuration", _obj()),
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
        _ref("RepositoryIndex"),
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
        _fields("name loaded:bool image"),
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
        _fields("name unloaded:bool"),
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

"""One route of the gateway's OpenAPI document (`Route`) and how it becomes an operation.

`Route` says a route's method, path, success status and body, the errors it may answer and
who may call it. The helpers build the three kinds the table (`openapi`) lists: management
routes (`management`), model routes (`model`) and the live board's pages (`board_page`).
Pure data: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from infless.gateway.openapi_schemas import STR, Schema, ref

JSON = "application/json"


def path_param(name: str) -> Schema:
    return {"name": name, "in": "path", "required": True, "schema": STR}


def query(name: str, schema: Schema, description: str, required: bool = False) -> Schema:
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
        params = [path_param(p[1:-1]) for p in self.path.split("/") if p.startswith("{")]
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


def as_json(schema: Schema) -> dict[str, Schema]:
    return {JSON: {"schema": schema}}


def management(
    method: str, path: str, summary: str, ok: int, schema: Schema | None, *errors: int, **kw: Any
) -> Route:
    """A management route: basic auth when on, JSON answers, 401 among its errors."""
    content = None if schema is None else as_json(schema)
    return Route(
        method=method,
        path=path,
        summary=summary,
        ok=ok,
        ok_content=content,
        errors=(401, *errors),
        security="management",
        **kw,
    )


def model(method: str, path: str, summary: str, schema: Schema, *errors: int, **kw: Any) -> Route:
    """A model route: the invoke token when set."""
    return Route(
        method=method,
        path=path,
        summary=summary,
        ok=200,
        ok_content=as_json(schema),
        errors=(401, 404, *errors),
        security="invoke",
        **kw,
    )


def board_page(path: str, summary: str, content: dict[str, Schema], *errors: int) -> Route:
    """A route of the live board: basic auth when on, not JSON."""
    return Route(
        method="get",
        path=path,
        summary=summary,
        ok=200,
        ok_content=content,
        errors=(401, *errors),
        security="management",
    )

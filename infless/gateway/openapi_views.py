"""The OpenAPI schemas of the status responses, generated from the view structs.

`STATUS_VIEWS` is the one list of view types the status routes answer with. Their
component schemas come from the same msgspec structs the gateway renders
(`msgspec.json.schema_components`), so a field added to a view is documented at once.
A new owner's views join by one line here. The document is OpenAPI 3.0, which writes
"may be null" as `nullable: true`; `openapi30` rewrites msgspec's JSON Schema that way.
Pure data: no I/O.
"""

from __future__ import annotations

from typing import Any

import msgspec

from infless.control.views import (
    FunctionStatusView,
    InstanceStatusView,
    ReadinessView,
    ServerStatusView,
)
from infless.gateway.openapi_schemas import Schema, ref
from infless.modelless.views import ModelView
from infless.registry.variants import RegisteredModel
from infless.workers.status import IdleWorkerView, StandbyWorkerView, TemplateView

REF_TEMPLATE = "#/components/schemas/{name}"

STATUS_VIEWS: tuple[type[msgspec.Struct], ...] = (
    FunctionStatusView,
    InstanceStatusView,
    IdleWorkerView,
    StandbyWorkerView,
    ServerStatusView,
    TemplateView,
    ReadinessView,
    RegisteredModel,
    ModelView,
)


def view_ref(view: type[msgspec.Struct]) -> Schema:
    """A reference to a view's component schema."""
    return ref(view.__name__)


def view_schemas() -> dict[str, Schema]:
    """Every status view's component schema (and the views they hold), by struct name."""
    _, components = msgspec.json.schema_components(STATUS_VIEWS, ref_template=REF_TEMPLATE)
    schemas = {name: openapi30(schema) for name, schema in components.items()}
    for schema in schemas.values():  # a docstring, without its indentation
        if "description" in schema:
            schema["description"] = " ".join(schema["description"].split())
    return schemas


def openapi30(schema: Any) -> Any:
    """`schema` with each `anyOf: [..., {"type": "null"}]` written as OpenAPI 3.0 does:
    the other schema with `nullable: true`."""
    if isinstance(schema, list):
        return [openapi30(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    rewritten = {key: openapi30(value) for key, value in schema.items()}
    options = rewritten.get("anyOf")
    if isinstance(options, list) and {"type": "null"} in options:
        others = [option for option in options if option != {"type": "null"}]
        del rewritten["anyOf"]
        if len(others) == 1 and "$ref" not in others[0]:
            rewritten.update(others[0])
        else:
            rewritten["anyOf"] = others
        rewritten["nullable"] = True
    return rewritten

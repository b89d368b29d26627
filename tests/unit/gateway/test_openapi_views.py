"""The status answers' OpenAPI schemas come from the view structs the gateway renders: each
view's component names every key its JSON can carry, and the document stays OpenAPI 3.0
(no JSON Schema `null` type, every reference resolves)."""

from __future__ import annotations

import json
import re
from typing import Any

import msgspec

from infless.control.views import FunctionStatusView
from infless.gateway.openapi import openapi_document
from infless.gateway.openapi_views import STATUS_VIEWS, openapi30


def _keys(view: type[msgspec.Struct]) -> set[str]:
    return {field.encode_name for field in msgspec.structs.fields(view)}


def test_each_status_view_has_a_component_naming_its_json_keys() -> None:
    schemas = openapi_document()["components"]["schemas"]
    for view in STATUS_VIEWS:
        assert set(schemas[view.__name__]["properties"]) == _keys(view), view.__name__
    status = schemas["FunctionStatusView"]
    assert {"latencyTargetMs", "availableReplicas", "lastError"} <= set(status["properties"])
    assert "coldStarts" not in status["required"]  # a failed function has none
    assert status["properties"]["lastError"] == {"type": "string", "nullable": True}


def test_the_status_routes_refer_to_the_view_components() -> None:
    paths = openapi_document()["paths"]
    ok = paths["/system/function/{name}"]["get"]["responses"]["200"]
    schema = ok["content"]["application/json"]["schema"]
    assert schema == {"$ref": "#/components/schemas/FunctionStatusView"}
    listed = paths["/system/instances"]["get"]["responses"]["200"]["content"]
    items = listed["application/json"]["schema"]["items"]["anyOf"]
    assert {"$ref": "#/components/schemas/IdleWorkerView"} in items


def test_the_document_is_openapi_30_and_every_reference_resolves() -> None:
    document = openapi_document()
    text = json.dumps(document)
    assert '"type": "null"' not in text
    schemas = document["components"]["schemas"]
    for name in re.findall(r'"#/components/schemas/([^"]+)"', text):
        assert name in schemas, name


def test_a_nullable_reference_keeps_its_reference_beside_nullable() -> None:
    ref = {"$ref": "#/components/schemas/X"}
    schema: Any = {"anyOf": [ref, {"type": "null"}]}
    assert openapi30(schema) == {"anyOf": [ref], "nullable": True}
    view = msgspec.json.schema(FunctionStatusView)
    assert "nullable" not in json.dumps(view)  # (msgspec's own schema is left alone)

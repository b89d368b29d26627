"""The component schemas of the gateway's OpenAPI document (`components.schemas`).

`SCHEMAS` names every request body and every response body the routes refer to
(`ref(name)`) except the status views, whose schemas `openapi_views` generates; `fields`
writes an object schema compactly ("name! count:int tags:strs"), and the primitive schemas
(`STR`, `INT`, ...) and `obj`/`arr`/`ref` are shared with the route table (`openapi`). Pure
data, like the document.
"""

from __future__ import annotations

from typing import Any

Schema = dict[str, Any]

STR: Schema = {"type": "string"}
INT: Schema = {"type": "integer"}
NUM: Schema = {"type": "number"}
BOOL: Schema = {"type": "boolean"}
TIME: Schema = {"type": "string", "format": "date-time"}
BINARY: Schema = {"type": "string", "format": "binary"}
_STRING_MAP: Schema = {"type": "object", "additionalProperties": STR}
DATATYPES = ["FP32", "FP16", "FP64", "INT64", "INT32", "INT16", "INT8", "UINT8", "BOOL"]


def ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def obj(required: list[str] | None = None, **properties: Schema) -> Schema:
    schema: Schema = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


def arr(items: Schema) -> Schema:
    return {"type": "array", "items": items}


_TYPES: dict[str, Schema] = {
    "str": STR,
    "int": INT,
    "num": NUM,
    "bool": BOOL,
    "time": TIME,
    "map": _STRING_MAP,
    "strs": arr(STR),
    "ints": arr(INT),
    "any": {},
}


def fields(spec: str, **extra: Schema) -> Schema:
    """A compact object schema: "name! count:int tags:strs" (! = required, default type str)."""
    properties: dict[str, Schema] = {}
    required: list[str] = []
    for token in spec.split():
        name, _, kind = token.partition(":")
        if name.endswith("!"):
            name = name[:-1]
            required.append(name)
        properties[name] = _TYPES[kind or "str"]
    return obj(required, **properties, **extra)


SCHEMAS: dict[str, Schema] = {
    "Error": fields("error! code"),
    "FunctionResources": fields("memory cpu"),
    "FunctionDeployment": fields(
        "service! image! namespace envProcess envVars:map constraints:strs secrets:strs "
        "labels:map annotations:map readOnlyRootFilesystem:bool",
        limits=ref("FunctionResources"),
        requests=ref("FunctionResources"),
    ),
    "Secret": fields("name! namespace value rawValue"),
    "DeleteFunctionRequest": fields("functionName! namespace"),
    "ScaleServiceRequest": fields("serviceName namespace replicas!:int"),
    "GatewayInfo": fields(
        "arch!",
        provider=fields("provider orchestration", version=fields("sha release")),
        version=fields("sha release commit_message"),
    ),
    "LogEntry": fields("name! namespace instance timestamp!:time text!"),
    "Sample": fields("inputs!:any"),
    "ServerMetadata": fields("name! version! extensions!:strs"),
    "TensorMetadata": fields("name! datatype! shape!:ints"),
    "ModelMetadata": fields(
        "name! versions:strs platform!",
        inputs=arr(ref("TensorMetadata")),
        outputs=arr(ref("TensorMetadata")),
    ),
    "RequestInput": fields(
        "name! shape!:ints data:any",
        datatype={"type": "string", "enum": DATATYPES},
        parameters=fields("binary_data_size:int"),
    ),
    "RequestOutput": fields("name!", parameters=fields("binary_data:bool")),
    "InferenceRequest": fields(
        "id",
        parameters=fields("binary_data_output:bool"),
        inputs=arr(ref("RequestInput")),
        outputs=arr(ref("RequestOutput")),
    ),
    "ResponseOutput": fields(
        "name! shape!:ints datatype! data:any", parameters=fields("binary_data_size:int")
    ),
    "InferenceResponse": fields("model_name! model_version id", outputs=arr(ref("ResponseOutput"))),
    "StoredPackage": fields("digest! image! name! bytes!:int"),
    "Registration": fields(
        "model! image! sloMs!:num maxBatch:int metric variants:strs cpus:ints",
        validation=fields("generate:int filename data"),
        apps=arr(ref("Application")),
    ),
    "Application": fields("id! latencyMs:num minAccuracy:num costWeight:num"),
    "PackageManifest": fields(
        "name! architecture! format weights_file program_file handler digest requirements:strs",
        inputs=arr(obj()),
        outputs=arr(obj()),
    ),
    "RepositoryIndex": arr(fields("name! version state! reason")),
    "RepositoryRequest": fields(
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

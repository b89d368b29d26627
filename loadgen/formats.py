"""Request formats: one sample encoded for a route and a body format, once, before a run.

Pure: no I/O. Owns what goes on the wire for each (route, format) pair; the samples come
from `bodies` (the same seeded samples whatever the format), the bytes go to the client.

* `/function/{name}` (route `function`):
  - `json`: `Content-Type: application/json`, `{"inputs": X}` (as `bodies.make_bodies`);
  - `msgpack`: `Content-Type: application/msgpack`, a map `{"inputs": T}` where T is a tensor
    object `{"dtype", "shape", "data": <bin>}` for a one-input function, else a map input
    name -> tensor object;
  - `raw`: `Content-Type: application/octet-stream`, the one input's bytes, with
    `X-Infless-Dtype` and `X-Infless-Shape` (comma-separated); one-input functions only.
* `/v2/models/{name}/infer` (route `v2`), one sample as a batch of 1:
  - `json`: V2 JSON tensors (`name`, `shape` [1, ...], `datatype`, flat `data`);
  - `raw`: Triton's binary tensor extension: a JSON header (inputs carry
    `parameters.binary_data_size`, outputs ask for `binary_data`) followed by the bytes, its
    length in `Inference-Header-Content-Length`;
  - `msgpack` is refused.

Binary data is the signature's dtype, little-endian, C order, without a batch dimension.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import quote

import msgspec
import numpy as np
import orjson

from loadgen.bodies import DEFAULT_SEQ_LEN, json_payload, make_samples
from loadgen.functions import FunctionInfo, InputSpec

BodyFormat = Literal["json", "msgpack", "raw"]
Route = Literal["function", "v2"]
BODY_FORMATS: tuple[BodyFormat, ...] = ("json", "msgpack", "raw")
ROUTES: tuple[Route, ...] = ("function", "v2")

JSON = "application/json"
MSGPACK = "application/msgpack"
OCTET_STREAM = "application/octet-stream"
DTYPE_HEADER = "X-Infless-Dtype"
SHAPE_HEADER = "X-Infless-Shape"
V2_HEADER_LENGTH = "Inference-Header-Content-Length"
V2_DATATYPES: dict[str, str] = {
    "float32": "FP32",
    "float16": "FP16",
    "float64": "FP64",
    "int64": "INT64",
    "int32": "INT32",
    "int16": "INT16",
    "int8": "INT8",
    "uint8": "UINT8",
    "bool": "BOOL",
}
_msgpack = msgspec.msgpack.Encoder()

Sample = Mapping[str, np.ndarray[Any, Any]]


class FormatError(ValueError):
    """A route/format pair that cannot carry a function's inputs."""


@dataclass(frozen=True, slots=True)
class PreparedRequest:
    """One request ready to send: path (below the gateway URL), content type and body."""

    path: str
    content_type: str
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()  # besides Content-Type and Content-Length


def function_path(name: str) -> str:
    return f"/function/{quote(name, safe='')}"


def v2_path(name: str) -> str:
    return f"/v2/models/{quote(name, safe='')}/infer"


def wire_array(array: np.ndarray[Any, Any], dtype: str) -> np.ndarray[Any, Any]:
    """The sample cast to the signature's dtype, little-endian and C-contiguous."""
    target = np.dtype(dtype)
    if target.itemsize > 1:
        target = target.newbyteorder("<")
    return np.ascontiguousarray(array.astype(target, copy=False))


def wire_bytes(array: np.ndarray[Any, Any], dtype: str) -> bytes:
    return wire_array(array, dtype).tobytes(order="C")


def tensor_object(array: np.ndarray[Any, Any], dtype: str) -> dict[str, Any]:
    """The msgpack tensor object: numpy dtype name, shape without batch, raw bytes."""
    return {"dtype": dtype, "shape": list(array.shape), "data": wire_bytes(array, dtype)}


def v2_datatype(spec: InputSpec) -> str:
    try:
        return V2_DATATYPES[spec.dtype]
    except KeyError:
        raise FormatError(
            f"input {spec.name!r}: dtype {spec.dtype!r} has no V2 datatype "
            f"(V2 carries {', '.join(V2_DATATYPES)})"
        ) from None


def check_format(function: FunctionInfo, body_format: BodyFormat, route: Route) -> None:
    """Refuse, naming the flag, a pair that cannot carry this function's inputs."""
    if body_format not in BODY_FORMATS:
        raise FormatError(f"--format {body_format!r}: choose one of {', '.join(BODY_FORMATS)}")
    if route not in ROUTES:
        raise FormatError(f"--route {route!r}: choose one of {', '.join(ROUTES)}")
    if route == "v2" and body_format == "msgpack":
        raise FormatError(
            "--format msgpack is not available with --route v2: V2 speaks JSON tensors "
            "(--format json) or Triton's binary tensor extension (--format raw)"
        )
    if route == "function" and body_format == "raw" and len(function.inputs) != 1:
        names = ", ".join(repr(s.name) for s in function.inputs) or "none"
        raise FormatError(
            f"--format raw carries one input's bytes, but function {function.name!r} takes "
            f"{len(function.inputs)} inputs ({names}): use --format msgpack or --format json"
        )
    if route == "v2":
        for spec in function.inputs:
            v2_datatype(spec)


def function_json(function: FunctionInfo, sample: Sample) -> PreparedRequest:
    return PreparedRequest(function_path(function.name), JSON, orjson.dumps(json_payload(sample)))


def function_msgpack(function: FunctionInfo, sample: Sample) -> PreparedRequest:
    tensors = {s.name: tensor_object(sample[s.name], s.dtype) for s in function.inputs}
    inputs: Any = next(iter(tensors.values())) if len(tensors) == 1 else tensors
    return PreparedRequest(
        function_path(function.name), MSGPACK, _msgpack.encode({"inputs": inputs})
    )


def function_raw(function: FunctionInfo, sample: Sample) -> PreparedRequest:
    (spec,) = function.inputs
    array = sample[spec.name]
    headers = ((DTYPE_HEADER, spec.dtype), (SHAPE_HEADER, ",".join(map(str, array.shape))))
    return PreparedRequest(
        function_path(function.name), OCTET_STREAM, wire_bytes(array, spec.dtype), headers
    )


def v2_json(function: FunctionInfo, sample: Sample) -> PreparedRequest:
    inputs = [
        {
            "name": spec.name,
            "shape": [1, *sample[spec.name].shape],
            "datatype": v2_datatype(spec),
            "data": sample[spec.name].reshape(-1).tolist(),
        }
        for spec in function.inputs
    ]
    return PreparedRequest(v2_path(function.name), JSON, orjson.dumps({"inputs": inputs}))


def v2_binary(function: FunctionInfo, sample: Sample) -> PreparedRequest:
    blobs = [wire_bytes(sample[spec.name], spec.dtype) for spec in function.inputs]
    document: dict[str, Any] = {
        "inputs": [
            {
                "name": spec.name,
                "shape": [1, *sample[spec.name].shape],
                "datatype": v2_datatype(spec),
                "parameters": {"binary_data_size": len(blob)},
            }
            for spec, blob in zip(function.inputs, blobs, strict=True)
        ]
    }
    if function.output_names:
        document["outputs"] = [
            {"name": name, "parameters": {"binary_data": True}} for name in function.output_names
        ]
    else:  # a signature without outputs: ask for every output in binary
        document["parameters"] = {"binary_data_output": True}
    header = orjson.dumps(document)
    return PreparedRequest(
        v2_path(function.name),
        OCTET_STREAM,
        header + b"".join(blobs),
        ((V2_HEADER_LENGTH, str(len(header))),),
    )


_ENCODERS = {
    ("function", "json"): function_json,
    ("function", "msgpack"): function_msgpack,
    ("function", "raw"): function_raw,
    ("v2", "json"): v2_json,
    ("v2", "raw"): v2_binary,
}


def encode_sample(
    function: FunctionInfo, sample: Sample, body_format: BodyFormat, route: Route
) -> PreparedRequest:
    check_format(function, body_format, route)
    return _ENCODERS[(route, body_format)](function, sample)


def prepare_requests(
    function: FunctionInfo,
    count: int,
    seed: int,
    seq_len_range: tuple[int, int] = DEFAULT_SEQ_LEN,
    body_format: BodyFormat = "json",
    route: Route = "function",
) -> tuple[PreparedRequest, ...]:
    """`count` distinct requests for the function, each encoded once; the client cycles
    through them. The samples are `bodies.make_samples`'s, so every format carries the
    same values for the same seed."""
    check_format(function, body_format, route)
    encode = _ENCODERS[(route, body_format)]
    return tuple(
        encode(function, sample) for sample in make_samples(function, count, seed, seq_len_range)
    )


def describe(body_format: BodyFormat, route: Route) -> str:
    path = "/v2/models/{name}/infer" if route == "v2" else "/function/{name}"
    return f"{body_format} bodies on {path}"

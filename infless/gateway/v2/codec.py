"""V2 inference bodies: JSON tensors and Triton's binary tensor data extension <-> numpy.

A request body is a JSON header, optionally followed by raw tensor blobs when the
`Inference-Header-Content-Length` header says where the JSON ends; binary inputs carry
`parameters.binary_data_size` instead of `data`. `BYTES` inputs (request bodies for a
function with a handler) are parsed by `byte_inputs`. Every malformed body is a `BadRequest`
(400) naming the field. Pure: bytes in, arrays out — no I/O, no aiohttp, never torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from infless.dataplane.request import Array
from infless.errors import BadRequest
from infless.gateway.v2.byte_inputs import (
    BODY_INPUT,
    BYTES,
    bytes_from_binary,
    bytes_from_json,
    element_content_type,
)
from infless.gateway.v2.datatypes import numpy_dtype, v2_datatype
from infless.types import TensorSpec
from infless.workers.protocol import RawRequest

HEADER_LENGTH = "Inference-Header-Content-Length"
MAX_DIMS = 16
SHARED_MEMORY_KEYS = ("shared_memory_region", "shared_memory_byte_size", "shared_memory_offset")
# Which JSON number kinds each target dtype kind accepts (numpy dtype.kind letters).
_ACCEPTED_KINDS = {"f": "iuf", "i": "iu", "u": "iu", "b": "b"}


@dataclass(frozen=True, slots=True)
class InputTensor:
    name: str
    datatype: str
    shape: tuple[int, ...]
    array: Array  # BYTES: an object array of `bytes`
    content_type: str = ""  # BYTES: what each element is, for a handler


@dataclass(frozen=True, slots=True)
class RequestedOutput:
    name: str
    binary: bool | None  # None: the request-level `binary_data_output` decides


@dataclass(frozen=True, slots=True)
class InferRequest:
    id: str | None
    inputs: tuple[InputTensor, ...]
    outputs: tuple[RequestedOutput, ...] | None  # None: every output, request default
    binary_output: bool
    parameters: Mapping[str, Any] = field(default_factory=dict)  # the request's own


def _object(value: object, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadRequest(f"{where} must be a JSON object, got {type(value).__name__}")
    return value


def _flag(parameters: Mapping[str, Any], key: str, where: str) -> bool | None:
    value = parameters.get(key)
    if value is None or isinstance(value, bool):
        return value
    raise BadRequest(f"{where}.parameters.{key} must be true or false, got {value!r}")


def _reject_shared_memory(parameters: Mapping[str, Any], where: str) -> None:
    if any(key in parameters for key in SHARED_MEMORY_KEYS):
        raise BadRequest(f"{where}: shared memory not supported by a remote gateway")


def _shape(value: object, where: str) -> tuple[int, ...]:
    if not isinstance(value, list) or len(value) > MAX_DIMS:
        raise BadRequest(f"{where}.shape must be a list of at most {MAX_DIMS} integers")
    if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in value):
        raise BadRequest(f"{where}.shape must hold non-negative integers, got {value!r}")
    return tuple(value)


def split_body(body: bytes, header_length: str | None) -> tuple[bytes, memoryview]:
    """The JSON header and the binary tail of a request body."""
    if header_length is None:
        return body, memoryview(b"")
    try:
        length = int(header_length)
    except ValueError:
        raise BadRequest(f"{HEADER_LENGTH} = {header_length!r}: expected an integer") from None
    if length == 0:
        raise BadRequest(
            f"{HEADER_LENGTH}: 0 (a raw binary request) is not supported; send a JSON header"
        )
    if not 0 < length <= len(body):
        raise BadRequest(
            f"{HEADER_LENGTH} = {length}: must be between 1 and the body size ({len(body)})"
        )
    return body[:length], memoryview(body)[length:]


def _from_json(data: object, dtype: np.dtype[np.generic], count: int, where: str) -> Array:
    if not isinstance(data, list):
        raise BadRequest(f"{where}.data must be a (nested or flat) list of values")
    try:
        array = np.asarray(data)
    except (ValueError, TypeError, OverflowError):
        raise BadRequest(f"{where}.data is not a rectangular list of numbers") from None
    if array.dtype.kind not in _ACCEPTED_KINDS.get(dtype.kind, dtype.kind):
        got = "strings" if array.dtype.kind in "USO" else f"{array.dtype} values"
        raise BadRequest(f"{where}.data must hold {v2_datatype(dtype)} values, got {got}")
    if array.size != count:
        raise BadRequest(f"{where}.data holds {array.size} values, its shape needs {count}")
    if dtype.kind in "iu" and array.dtype != dtype and array.size:
        info = np.iinfo(dtype.name)
        if array.min() < info.min or array.max() > info.max:
            raise BadRequest(f"{where}.data has values outside the {v2_datatype(dtype)} range")
    with np.errstate(all="ignore"):  # float overflow to inf is the caller's business
        return array.astype(dtype, copy=False).reshape(-1)


def _from_binary(
    blobs: memoryview,
    offset: int,
    size: object,
    dtype: np.dtype[np.generic],
    count: int,
    where: str,
) -> Array:
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise BadRequest(f"{where}.parameters.binary_data_size must be a non-negative integer")
    if size != count * dtype.itemsize:
        raise BadRequest(
            f"{where}: binary_data_size = {size} bytes, but {count} {v2_datatype(dtype)} "
            f"values take {count * dtype.itemsize}"
        )
    if offset + size > len(blobs):
        raise BadRequest(f"{where}: the body ends before its {size} bytes of binary data")
    chunk = blobs[offset : offset + size]
    if dtype.kind == "b":
        return np.frombuffer(chunk, dtype=np.uint8, count=count).astype(np.bool_)
    return np.frombuffer(chunk, dtype=dtype, count=count)


def _input(raw: object, index: int, blobs: memoryview, offset: int) -> tuple[InputTensor, int]:
    where = f"inputs[{index}]"
    entry = _object(raw, where)
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        raise BadRequest(f"{where}.name must be a non-empty string")
    where = f"input {name!r}"
    shape = _shape(entry.get("shape"), where)
    parameters = _object(entry.get("parameters"), f"{where}.parameters")
    _reject_shared_memory(parameters, where)
    count = math.prod(shape)
    if entry.get("datatype") == BYTES:
        return _bytes_input(entry, name, shape, parameters, blobs, offset)
    dtype = numpy_dtype(entry.get("datatype"), where)
    if "binary_data_size" in parameters:
        if "data" in entry:
            raise BadRequest(f"{where}: give either data or binary_data_size, not both")
        size = parameters["binary_data_size"]
        flat = _from_binary(blobs, offset, size, dtype, count, where)
        offset += int(size)
    elif "data" in entry:
        flat = _from_json(entry["data"], dtype, count, where)
    else:
        raise BadRequest(f"{where}: needs data, or parameters.binary_data_size with binary data")
    return InputTensor(name, str(entry["datatype"]), shape, flat.reshape(shape)), offset


def _bytes_input(
    entry: Mapping[str, Any],
    name: str,
    shape: tuple[int, ...],
    parameters: Mapping[str, Any],
    blobs: memoryview,
    offset: int,
) -> tuple[InputTensor, int]:
    where = f"input {name!r}"
    count = math.prod(shape)
    binary = "binary_data_size" in parameters
    if binary:
        if "data" in entry:
            raise BadRequest(f"{where}: give either data or binary_data_size, not both")
        size = parameters["binary_data_size"]
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise BadRequest(f"{where}.parameters.binary_data_size must be a non-negative integer")
        if offset + size > len(blobs):
            raise BadRequest(f"{where}: the body ends before its {size} bytes of binary data")
        flat = bytes_from_binary(blobs[offset : offset + size], count, where)
        offset += size
    elif "data" in entry:
        flat = bytes_from_json(entry["data"], count, where)
    else:
        raise BadRequest(f"{where}: needs data, or parameters.binary_data_size with binary data")
    content_type = element_content_type(parameters, binary)
    return InputTensor(name, BYTES, shape, flat.reshape(shape), content_type), offset


def _requested_outputs(raw: object) -> tuple[RequestedOutput, ...] | None:
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise BadRequest("outputs must be a list of {name, parameters} objects")
    outputs = []
    for index, item in enumerate(raw):
        entry = _object(item, f"outputs[{index}]")
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise BadRequest(f"outputs[{index}].name must be a non-empty string")
        parameters = _object(entry.get("parameters"), f"output {name!r}.parameters")
        _reject_shared_memory(parameters, f"output {name!r}")
        if "classification" in parameters:
            raise BadRequest(f"output {name!r}: the classification extension is not supported")
        outputs.append(RequestedOutput(name, _flag(parameters, "binary_data", f"output {name!r}")))
    return tuple(outputs)


def parse_infer_request(body: bytes, header_length: str | None) -> InferRequest:
    """A V2 inference request body (JSON, or JSON + binary blobs) -> an InferRequest."""
    header, blobs = split_body(body, header_length)
    try:
        document = orjson.loads(header)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"the inference request header is not valid JSON: {exc}") from None
    document = _object(document, "the inference request")
    request_id = document.get("id")
    if request_id is not None and not isinstance(request_id, str):
        raise BadRequest(f"id must be a string, got {type(request_id).__name__}")
    parameters = _object(document.get("parameters"), "parameters")
    binary_output = _flag(parameters, "binary_data_output", "request") or False
    raw_inputs = document.get("inputs")
    if not isinstance(raw_inputs, list) or not raw_inputs:
        raise BadRequest("inputs must be a non-empty list of tensors")
    inputs = []
    offset = 0
    for index, raw in enumerate(raw_inputs):
        tensor, offset = _input(raw, index, blobs, offset)
        inputs.append(tensor)
    if offset != len(blobs):
        raise BadRequest(
            f"the body holds {len(blobs) - offset} bytes beyond its inputs' binary_data_size"
        )
    return InferRequest(
        request_id,
        tuple(inputs),
        _requested_outputs(document.get("outputs")),
        binary_output,
        parameters,
    )


def describe_signature(specs: Sequence[TensorSpec]) -> str:
    return "; ".join(
        f"{s.name}: {v2_datatype(s.dtype)}[{', '.join(map(str, [-1, *s.shape]))}]" for s in specs
    )


def bind_inputs(
    inputs: Sequence[InputTensor], specs: Sequence[TensorSpec]
) -> tuple[int, dict[str, Array]]:
    """Check the inputs against a function's signature -> (batch size, arrays by name)."""
    by_name: dict[str, InputTensor] = {}
    for tensor in inputs:
        if tensor.name in by_name:
            raise BadRequest(f"input {tensor.name!r} appears twice")
        by_name[tensor.name] = tensor
    expected = {s.name for s in specs}
    if set(by_name) != expected:
        missing = sorted(expected - set(by_name))
        unknown = sorted(set(by_name) - expected)
        parts = [f"missing {missing}"] * bool(missing) + [f"unknown {unknown}"] * bool(unknown)
        raise BadRequest(f"inputs: {'; '.join(parts)}; expected {describe_signature(specs)}")
    batch: int | None = None
    arrays: dict[str, Array] = {}
    for spec in specs:
        tensor = by_name[spec.name]
        datatype = v2_datatype(spec.dtype)
        if tensor.datatype != datatype:
            raise BadRequest(
                f"input {spec.name!r} has datatype {tensor.datatype}, expected {datatype}"
            )
        shape = tensor.shape
        fits = len(shape) == len(spec.shape) + 1 and all(
            want < 0 or got == want for got, want in zip(shape[1:], spec.shape, strict=False)
        )
        if not fits or 0 in shape:
            raise BadRequest(
                f"input {spec.name!r} has shape {list(shape)}, expected "
                f"{[-1, *spec.shape]} (batch first; -1 = any size >= 1)"
            )
        if batch is not None and shape[0] != batch:
            raise BadRequest(f"inputs disagree on the batch size: {batch} and {shape[0]}")
        batch = shape[0]
        arrays[spec.name] = tensor.array.astype(np.dtype(spec.dtype), copy=False)
    assert batch is not None
    return batch, arrays


def bind_bodies(inputs: Sequence[InputTensor]) -> list[RawRequest]:
    """A request's inputs -> one raw request per row, for a function with a handler: its
    one input `body` (BYTES, shape [-1, 1] or [-1]) holds a request body per row."""
    if len(inputs) != 1 or inputs[0].name != BODY_INPUT:
        raise BadRequest(
            f"inputs: this function takes one input {BODY_INPUT!r} (BYTES, shape [-1, 1]: a "
            f"request body per row), got {[i.name for i in inputs]}"
        )
    (tensor,) = inputs
    shape = tensor.shape
    if tensor.datatype != BYTES:
        raise BadRequest(f"input {tensor.name!r} has datatype {tensor.datatype}, expected BYTES")
    if len(shape) not in (1, 2) or (len(shape) == 2 and shape[1] != 1) or not shape[0]:
        raise BadRequest(
            f"input {tensor.name!r} has shape {list(shape)}, expected [-1, 1] or [-1] "
            "(one body per row, at least one row)"
        )
    content_type = tensor.content_type
    elements: list[bytes] = tensor.array.reshape(-1).tolist()
    return [RawRequest(element, content_type, postprocess=False) for element in elements]


def select_outputs(request: InferRequest, available: Sequence[str]) -> list[tuple[str, bool]]:
    """Which outputs to return, in order, and whether each travels as binary."""
    if request.outputs is None:
        return [(name, request.binary_output) for name in available]
    chosen = []
    for output in request.outputs:
        if output.name not in available:
            raise BadRequest(f"output {output.name!r} is unknown; the model has {list(available)}")
        binary = request.binary_output if output.binary is None else output.binary
        chosen.append((output.name, binary))
    return chosen


def encode_infer_response(
    model_name: str,
    model_version: str,
    request_id: str | None,
    outputs: Sequence[tuple[str, Array, bool]],
    parameters: Mapping[str, object] | None = None,
) -> tuple[bytes, int | None]:
    """(body, JSON header length when binary outputs follow, else None)."""
    described: list[dict[str, object]] = []
    blobs: list[bytes] = []
    for name, array, binary in outputs:
        entry: dict[str, object] = {
            "name": name,
            "datatype": v2_datatype(array.dtype),
            "shape": list(array.shape),
        }
        if binary:
            data = np.ascontiguousarray(array)
            if data.dtype.kind == "b":
                data = data.astype(np.uint8)
            elif data.dtype.itemsize > 1:
                data = data.astype(data.dtype.newbyteorder("<"), copy=False)
            blob = data.tobytes()
            entry["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        else:
            entry["data"] = np.ascontiguousarray(array).reshape(-1)
        described.append(entry)
    document: dict[str, object] = {"model_name": model_name, "model_version": model_version}
    if request_id is not None:
        document["id"] = request_id
    if parameters:
        document["parameters"] = dict(parameters)
    document["outputs"] = described
    header = orjson.dumps(document, option=orjson.OPT_SERIALIZE_NUMPY)
    if not blobs:
        return header, None
    return header + b"".join(blobs), len(header)

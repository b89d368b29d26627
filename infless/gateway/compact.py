"""Compact bodies of the invoke route, beside JSON: msgpack and raw tensor bytes.

- msgpack (`Content-Type: application/msgpack`): a map `{"inputs": X}` where X is a tensor
  object for a one-input function, or a map input name -> tensor object; a tensor object is
  `{"dtype": "float32", "shape": [3, 32, 32], "data": <bin: little-endian C-order bytes>}`
  (nested arrays, as in JSON, are accepted too). The answer is `{"outputs": ...}` the same
  way.
- raw (`Content-Type: application/octet-stream`): the one input's little-endian C-order
  bytes; `X-Infless-Dtype` and `X-Infless-Shape` (comma-separated, no batch dimension) may
  be left out when they are the signature's. The answer is the one output's bytes with the
  same two headers (msgpack when a model has several outputs).

A 3×32×32 float sample decodes in microseconds this way, against 0.2–1 ms as JSON lists.
Every mismatch is a precise error naming the expected signature. Numpy only, never torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import msgspec
import numpy as np

from infless.dataplane.request import Array
from infless.errors import InputMismatch, MalformedBody
from infless.gateway.codec import signature_text, to_array
from infless.types import TensorSpec

MSGPACK = "application/msgpack"
RAW = "application/octet-stream"
DTYPE_HEADER = "X-Infless-Dtype"
SHAPE_HEADER = "X-Infless-Shape"
_decoder = msgspec.msgpack.Decoder()
_encoder = msgspec.msgpack.Encoder()


def _little_endian(dtype: str) -> np.dtype[np.generic]:
    return np.dtype(dtype).newbyteorder("<")


def tensor_from_bytes(data: bytes, dtype: str, shape: Sequence[int], spec: TensorSpec) -> Array:
    """A zero-copy view of `data` as the input `spec`, or a precise error."""
    if dtype != spec.dtype:
        raise InputMismatch(f"input {spec.name!r} must be {spec.dtype}, got {dtype}")
    fits = len(shape) == len(spec.shape) and all(
        d >= 0 and (e < 0 or d == e) for d, e in zip(shape, spec.shape, strict=True)
    )
    if not fits:
        raise InputMismatch(
            f"input {spec.name!r} has shape {list(shape)}, expected {spec.describe()} (one "
            "sample, no batch dimension)"
        )
    expected_bytes = math.prod(shape) * np.dtype(spec.dtype).itemsize
    if len(data) != expected_bytes:
        raise InputMismatch(
            f"input {spec.name!r}: {len(data)} bytes do not hold {spec.dtype}{list(shape)} "
            f"({expected_bytes} bytes)"
        )
    return np.frombuffer(data, dtype=_little_endian(spec.dtype)).reshape(shape)


def decode_raw(
    body: bytes, headers: Mapping[str, str], specs: Sequence[TensorSpec]
) -> dict[str, Array]:
    if len(specs) != 1:
        raise InputMismatch(
            f"raw tensor bodies ({RAW}) carry one input; this function takes {len(specs)}: "
            f"send msgpack ({MSGPACK}) or JSON ({signature_text(specs)})"
        )
    (spec,) = specs
    dtype = headers.get(DTYPE_HEADER, spec.dtype).strip()
    shape_text = headers.get(SHAPE_HEADER)
    if shape_text is None:
        if any(d < 0 for d in spec.shape):
            raise InputMismatch(
                f"input {spec.name!r} has a variable dimension: send {SHAPE_HEADER} "
                f"({spec.describe()})"
            )
        shape: tuple[int, ...] = spec.shape
    else:
        try:
            shape = tuple(int(d) for d in shape_text.split(",") if d.strip())
        except ValueError:
            raise MalformedBody(
                f"{SHAPE_HEADER}: {shape_text!r} is not a comma-separated list of integers"
            ) from None
    return {spec.name: tensor_from_bytes(body, dtype, shape, spec)}


def _tensor(value: object, spec: TensorSpec, specs: Sequence[TensorSpec]) -> Array:
    if isinstance(value, dict) and "data" in value:
        data, dtype, shape = value.get("data"), value.get("dtype"), value.get("shape")
        if (
            not isinstance(data, bytes)
            or not isinstance(dtype, str)
            or not isinstance(shape, list)
            or not all(isinstance(d, int) for d in shape)
        ):
            raise MalformedBody(
                f"input {spec.name!r}: a tensor object is "
                '{"dtype": str, "shape": [int, ...], "data": bin}'
            )
        return tensor_from_bytes(data, dtype, shape, spec)
    return to_array(value, spec, specs)


def decode_msgpack(body: bytes, specs: Sequence[TensorSpec]) -> dict[str, Array]:
    try:
        document = _decoder.decode(body)
    except msgspec.DecodeError as exc:
        raise MalformedBody(f"the body is not valid msgpack: {exc}") from None
    if not isinstance(document, dict) or "inputs" not in document:
        raise MalformedBody('expected a msgpack map {"inputs": ...} holding one sample')
    raw = document["inputs"]
    one_tensor = not isinstance(raw, dict) or "data" in raw
    if one_tensor:
        if len(specs) != 1:
            names = ", ".join(repr(s.name) for s in specs)
            raise InputMismatch(
                f"this function takes {len(specs)} inputs; send a map keyed by name "
                f"({names}): {signature_text(specs)}"
            )
        return {specs[0].name: _tensor(raw, specs[0], specs)}
    missing = [s.name for s in specs if s.name not in raw]
    unknown = sorted(set(raw) - {s.name for s in specs})
    if missing or unknown:
        parts = [f"missing {', '.join(map(repr, missing))}"] if missing else []
        parts += [f"unknown {', '.join(map(repr, unknown))}"] if unknown else []
        raise InputMismatch(f"inputs: {'; '.join(parts)}; expected {signature_text(specs)}")
    return {spec.name: _tensor(raw[spec.name], spec, specs) for spec in specs}


def _tensor_object(array: Array) -> dict[str, object]:
    contiguous = np.ascontiguousarray(array, dtype=_little_endian(array.dtype.str))
    return {"dtype": array.dtype.name, "shape": list(array.shape), "data": contiguous.tobytes()}


def encode_msgpack(outputs: Mapping[str, Array]) -> bytes:
    if len(outputs) == 1:
        (value,) = outputs.values()
        return _encoder.encode({"outputs": _tensor_object(value)})
    return _encoder.encode({"outputs": {k: _tensor_object(v) for k, v in outputs.items()}})


def raw_headers(array: Array) -> dict[str, str]:
    return {DTYPE_HEADER: array.dtype.name, SHAPE_HEADER: ",".join(map(str, array.shape))}


def encode_raw(array: Array) -> bytes:
    return np.ascontiguousarray(array, dtype=_little_endian(array.dtype.str)).tobytes()

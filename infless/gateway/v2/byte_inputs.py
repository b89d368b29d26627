"""V2 `BYTES` tensors: how a function with a handler takes requests over the Open Inference
Protocol.

Such a function has one V2 input, `body`, of datatype `BYTES` and shape `[-1, 1]` (or
`[-1]`): each row is one request body for the handler, as `/function/{name}` would get it.
In JSON an element is a string (sent as its UTF-8 bytes); in Triton's binary extension the
elements are each a 4-byte little-endian length followed by that many bytes. The answer is
the model's output tensors (the handler's `postprocess` is for `/function/{name}`). Pure:
bytes in, rows out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from infless.dataplane.request import Array
from infless.errors import BadRequest

BYTES = "BYTES"
BODY_INPUT = "body"
BODY_SHAPE = (1,)  # one body per row (Triton's `dims: [1]`)
TEXT = "text/plain; charset=utf-8"
BINARY = "application/octet-stream"
LENGTH_BYTES = 4


def _flatten(data: object, into: list[object]) -> None:
    if isinstance(data, list):
        for item in data:
            _flatten(item, into)
    else:
        into.append(data)


def bytes_from_json(data: object, count: int, where: str) -> Array:
    """JSON `data` of a BYTES tensor (strings, nested or flat) -> an object array of bytes."""
    if not isinstance(data, list):
        raise BadRequest(f"{where}.data must be a (nested or flat) list of strings")
    flat: list[object] = []
    _flatten(data, flat)
    if not all(isinstance(item, str) for item in flat):
        raise BadRequest(f"{where}.data must hold strings (BYTES elements)")
    if len(flat) != count:
        raise BadRequest(f"{where}.data holds {len(flat)} values, its shape needs {count}")
    array = np.empty(count, dtype=object)
    array[:] = [str(item).encode() for item in flat]
    return array


def bytes_from_binary(chunk: memoryview, count: int, where: str) -> Array:
    """Binary BYTES data (length-prefixed elements) -> an object array of bytes."""
    elements: list[bytes] = []
    offset = 0
    while offset < len(chunk):
        if offset + LENGTH_BYTES > len(chunk):
            raise BadRequest(f"{where}: binary BYTES data ends inside an element's length")
        length = int.from_bytes(chunk[offset : offset + LENGTH_BYTES], "little")
        offset += LENGTH_BYTES
        if offset + length > len(chunk):
            raise BadRequest(
                f"{where}: a BYTES element of {length} bytes runs past its binary_data_size"
            )
        elements.append(bytes(chunk[offset : offset + length]))
        offset += length
    if len(elements) != count:
        raise BadRequest(
            f"{where}: binary data holds {len(elements)} elements, its shape needs {count}"
        )
    array = np.empty(count, dtype=object)
    array[:] = elements
    return array


def encode_binary(elements: Sequence[bytes]) -> bytes:
    """Elements -> Triton's binary BYTES layout (what tritonclient sends)."""
    return b"".join(len(e).to_bytes(LENGTH_BYTES, "little") + e for e in elements)


def element_content_type(parameters: Mapping[str, Any], binary: bool) -> str:
    """An input's `parameters.content_type` when it names a media type, else by encoding."""
    given = parameters.get("content_type")
    if isinstance(given, str) and "/" in given:
        return given
    return BINARY if binary else TEXT

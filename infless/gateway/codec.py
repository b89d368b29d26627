"""Request and response bodies of the invoke route: JSON samples <-> validated numpy arrays.

`{"inputs": X}` carries one sample: X is an array when the function has one input, or an
object keyed by input name. Every mismatch is a precise error naming the expected
signature. Gateway side: numpy only, never torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import orjson

from infless.dataplane.request import Array
from infless.errors import InputMismatch, MalformedBody
from infless.types import TensorSpec

# Which JSON number kinds each signature dtype kind accepts (numpy dtype.kind letters).
_ACCEPTED_KINDS = {"f": "iuf", "i": "iu", "u": "iu", "b": "b"}
_DUMP_OPTIONS = orjson.OPT_SERIALIZE_NUMPY


def signature_text(specs: Sequence[TensorSpec]) -> str:
    return "; ".join(spec.describe() for spec in specs)


def _shape_matches(actual: tuple[int, ...], expected: tuple[int, ...]) -> bool:
    return len(actual) == len(expected) and all(
        e < 0 or a == e for a, e in zip(actual, expected, strict=True)
    )


def to_array(value: object, spec: TensorSpec, specs: Sequence[TensorSpec]) -> Array:
    """One input value -> an array of the spec's dtype and shape, or InputMismatch."""
    try:
        array = np.asarray(value)
    except (ValueError, TypeError):
        raise InputMismatch(
            f"input {spec.name!r} is not a rectangular array; expected {signature_text(specs)}"
        ) from None
    target = np.dtype(spec.dtype)
    if array.dtype.kind not in _ACCEPTED_KINDS.get(target.kind, target.kind):
        got = "strings" if array.dtype.kind in "US" else f"{array.dtype} values"
        if array.dtype.kind == "O":
            got = "mixed or ragged values"
        raise InputMismatch(
            f"input {spec.name!r} must hold {spec.dtype} values, got {got}; "
            f"expected {signature_text(specs)}"
        )
    if not _shape_matches(array.shape, spec.shape):
        raise InputMismatch(
            f"input {spec.name!r} has shape {list(array.shape)}, expected "
            f"{spec.describe()} (one sample, no batch dimension)"
        )
    if array.dtype != target:
        if target.kind in "iu" and array.size:
            info = np.iinfo(target)
            if array.min() < info.min or array.max() > info.max:
                raise InputMismatch(f"input {spec.name!r} has values outside the {target} range")
        array = array.astype(target)
    return array


def decode_inputs(body: bytes, specs: Sequence[TensorSpec]) -> dict[str, Array]:
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise MalformedBody(f"the body is not valid JSON: {exc}") from None
    if not isinstance(document, dict) or "inputs" not in document:
        raise MalformedBody('expected a JSON object {"inputs": ...} holding one sample')
    raw = document["inputs"]
    if not isinstance(raw, dict):
        if len(specs) != 1:
            names = ", ".join(repr(s.name) for s in specs)
            raise InputMismatch(
                f"this function takes {len(specs)} inputs; send an object keyed by name "
                f"({names}): {signature_text(specs)}"
            )
        return {specs[0].name: to_array(raw, specs[0], specs)}
    missing = [s.name for s in specs if s.name not in raw]
    unknown = sorted(set(raw) - {s.name for s in specs})
    if missing or unknown:
        parts = []
        if missing:
            parts.append(f"missing {', '.join(map(repr, missing))}")
        if unknown:
            parts.append(f"unknown {', '.join(map(repr, unknown))}")
        raise InputMismatch(f"inputs: {'; '.join(parts)}; expected {signature_text(specs)}")
    return {spec.name: to_array(raw[spec.name], spec, specs) for spec in specs}


def encode_outputs(outputs: Mapping[str, Array]) -> bytes:
    if len(outputs) == 1:
        (value,) = outputs.values()
        return orjson.dumps({"outputs": value}, option=_DUMP_OPTIONS)
    return orjson.dumps({"outputs": dict(outputs)}, option=_DUMP_OPTIONS)

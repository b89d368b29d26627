"""Request bodies from a function's input signature: random, seeded, valid for each dtype.

Pure: no I/O. Bodies are encoded once, before a run (the client only sends bytes); the
compact and V2 encodings of the same samples are `formats`'s.

Rules (one sample, no batch dimension):

* a dimension of -1 gets one length per sample, drawn from `seq_len` (inclusive), shared by
  every -1 dimension of that sample (so `input_ids` and `attention_mask` agree);
* float dtypes: standard normal values rounded to 4 decimals;
* integer dtypes: the signature's hint when present (`vocabSize: V` -> [0, V),
  `range: [lo, hi]` inclusive); else names containing "mask" get 1s, names containing
  "type_ids" or "segment" get 0s, and everything else gets token-like ids in
  [0, min(1000, dtype max)) -- small non-negative ints valid for any vocabulary >= 1000;
* bool: fair coin flips.

One input is sent as `{"inputs": X}`, several as `{"inputs": {name: X, ...}}`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import orjson

from loadgen.functions import FunctionInfo, InputSpec

DEFAULT_INT_HIGH = 1000
DEFAULT_SEQ_LEN = (8, 32)
FLOAT_DECIMALS = 4
_FLOATS = frozenset({"float16", "float32", "float64"})
_INTS = frozenset({"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"})


class SignatureError(ValueError):
    """A signature the body generator cannot satisfy."""


def concrete_shape(shape: Sequence[int], seq_len: int) -> tuple[int, ...]:
    return tuple(seq_len if d < 0 else d for d in shape)


def int_bounds(spec: InputSpec) -> tuple[int, int]:
    """[low, high) for an integer input, clamped to what the dtype can hold."""
    info = np.iinfo(np.dtype(spec.dtype))
    if spec.low is not None and spec.high is not None:
        low, high = spec.low, spec.high
    else:
        lowered = spec.name.lower()
        if "mask" in lowered:
            low, high = 1, 2
        elif "type_ids" in lowered or "segment" in lowered:
            low, high = 0, 1
        else:
            low, high = 0, DEFAULT_INT_HIGH
    low = max(low, int(info.min))
    high = min(high, int(info.max) + 1)
    if high <= low:
        raise SignatureError(
            f"input {spec.name!r}: value range [{low}, {high}) is empty for dtype {spec.dtype}"
        )
    return low, high


def sample_array(spec: InputSpec, rng: np.random.Generator, seq_len: int) -> np.ndarray[Any, Any]:
    """One input's value as an array: float64 (rounded), int64 or bool, the signature's shape.

    The JSON body sends these values as they are; the binary formats cast them to the
    signature's dtype (`formats.wire_array`)."""
    shape = concrete_shape(spec.shape, seq_len)
    values: np.ndarray[Any, Any]
    if spec.dtype in _FLOATS:
        values = np.round(rng.standard_normal(shape), FLOAT_DECIMALS)
    elif spec.dtype in _INTS:
        low, high = int_bounds(spec)
        values = rng.integers(low, high, size=shape, dtype=np.int64)
    elif spec.dtype == "bool":
        values = rng.integers(0, 2, size=shape).astype(bool)
    else:
        raise SignatureError(
            f"input {spec.name!r}: dtype {spec.dtype!r} is not supported "
            f"(use one of {', '.join(sorted(_FLOATS | _INTS | {'bool'}))})"
        )
    return values


def sample_input(spec: InputSpec, rng: np.random.Generator, seq_len: int) -> Any:
    """One input's value as nested lists (or a scalar for shape [])."""
    return sample_array(spec, rng, seq_len).tolist()


def sample_arrays(
    inputs: Sequence[InputSpec], rng: np.random.Generator, seq_len_range: tuple[int, int]
) -> dict[str, np.ndarray[Any, Any]]:
    """One sample: every input's array (see `sample_array`), in signature order."""
    if not inputs:
        raise SignatureError("the function's signature lists no inputs; cannot build a body")
    low, high = seq_len_range
    if not 1 <= low <= high:
        raise SignatureError(f"seq_len {low}:{high}: need 1 <= min <= max")
    seq_len = int(rng.integers(low, high + 1))
    return {spec.name: sample_array(spec, rng, seq_len) for spec in inputs}


def sample_payload(
    inputs: Sequence[InputSpec], rng: np.random.Generator, seq_len_range: tuple[int, int]
) -> dict[str, Any]:
    """One sample as the JSON document `{"inputs": X}`."""
    return json_payload(sample_arrays(inputs, rng, seq_len_range))


def json_payload(arrays: Mapping[str, np.ndarray[Any, Any]]) -> dict[str, Any]:
    if len(arrays) == 1:
        (value,) = arrays.values()
        return {"inputs": value.tolist()}
    return {"inputs": {name: value.tolist() for name, value in arrays.items()}}


def sample_rng(function_name: str, seed: int) -> np.random.Generator:
    """The function's own generator: adding a function does not change the others' bodies."""
    name_key = int.from_bytes(hashlib.sha256(function_name.encode()).digest()[:8], "little")
    return np.random.default_rng([seed, name_key])


def make_samples(
    function: FunctionInfo,
    count: int,
    seed: int,
    seq_len_range: tuple[int, int] = DEFAULT_SEQ_LEN,
) -> tuple[dict[str, np.ndarray[Any, Any]], ...]:
    """`count` seeded samples for the function (the same ones whatever the body format)."""
    if count < 1:
        raise ValueError(f"count={count}: need at least one body")
    rng = sample_rng(function.name, seed)
    return tuple(sample_arrays(function.inputs, rng, seq_len_range) for _ in range(count))


def make_bodies(
    function: FunctionInfo,
    count: int,
    seed: int,
    seq_len_range: tuple[int, int] = DEFAULT_SEQ_LEN,
) -> tuple[bytes, ...]:
    """`count` distinct JSON bodies for the function; the client cycles through them."""
    samples = make_samples(function, count, seed, seq_len_range)
    return tuple(orjson.dumps(json_payload(sample)) for sample in samples)

"""A package's signature: the names, dtypes and shapes (batch dimension left out) of its
inputs and outputs — parsed from the command line, or inferred from example tensors.

`parse_spec("image:float32:3x224x224")` reads the CLI form (`-1` for a dimension of any
length); `infer_specs` names example tensors (a dict keeps its keys; a tuple takes the
forward's parameter names) and reads their dtypes and shapes, making the dimensions listed
in `dynamic` variable (-1). Pure: numpy-like objects with `.shape` and `.dtype` in, specs
out; no torch import (the caller converts torch dtypes with `dtype_name`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Protocol

from infless.types import SUPPORTED_DTYPES, TensorSpec

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")


class SignatureError(ValueError):
    """A signature that cannot be: the message names the tensor and the fix."""


def parse_spec(text: str) -> TensorSpec:
    """`name:dtype:d1xd2x...` (`-1`: any length; `name:dtype:` or `name:dtype:scalar` for no
    dimensions) -> a TensorSpec."""
    parts = text.split(":")
    if len(parts) != 3:
        raise SignatureError(
            f"{text!r}: expected name:dtype:shape, e.g. image:float32:3x224x224 or ids:int64:-1"
        )
    name, dtype, shape_text = (part.strip() for part in parts)
    check_name(name)
    check_dtype(name, dtype)
    if shape_text in ("", "scalar"):
        return TensorSpec(name, dtype, ())
    try:
        shape = tuple(int(d) for d in shape_text.lower().split("x"))
    except ValueError:
        raise SignatureError(
            f"{text!r}: the shape {shape_text!r} must be dimensions joined by 'x' (3x224x224)"
        ) from None
    if any(d == 0 or d < -1 for d in shape):
        raise SignatureError(f"{text!r}: dimensions are positive, or -1 for any length")
    return TensorSpec(name, dtype, shape)


def check_name(name: str) -> None:
    if not _NAME.match(name):
        raise SignatureError(
            f"tensor name {name!r}: use letters, digits, '_', '.', '-' (not starting with a digit)"
        )


def check_dtype(name: str, dtype: str) -> None:
    if dtype not in SUPPORTED_DTYPES:
        raise SignatureError(
            f"tensor {name!r}: dtype {dtype!r} is not supported; use one of "
            f"{', '.join(sorted(SUPPORTED_DTYPES))}"
        )


def dtype_name(dtype: object) -> str:
    """`torch.float32` / `numpy.dtype('float32')` / "float32" -> "float32"."""
    return str(dtype).removeprefix("torch.")


class Shaped(Protocol):
    """What `infer_specs` reads of an example tensor (a torch.Tensor or numpy array fits)."""

    @property
    def shape(self) -> Sequence[int]: ...

    @property
    def dtype(self) -> object: ...


def infer_specs(
    examples: Mapping[str, Shaped],
    dynamic: Mapping[str, Sequence[int]] | None = None,
    *,
    what: str = "input",
) -> list[TensorSpec]:
    """One spec per example, in order: its dtype and its shape without the batch dimension,
    the dimensions in `dynamic[name]` (counted without the batch dimension) as -1."""
    dynamic = dict(dynamic or {})
    unknown = sorted(set(dynamic) - set(examples))
    if unknown:
        raise SignatureError(
            f"dynamic dimensions given for {unknown}, but the {what}s are {list(examples)}"
        )
    specs = []
    for name, example in examples.items():
        check_name(name)
        dtype = dtype_name(example.dtype)
        check_dtype(name, dtype)
        shape = tuple(int(d) for d in example.shape)
        if not shape:
            raise SignatureError(
                f"{what} {name!r} is a scalar; examples carry a batch dimension first "
                "(e.g. torch.randn(2, 10) for a batch of two 10-d samples)"
            )
        dims = list(shape[1:])
        for index in dynamic.get(name, ()):
            if not 0 <= index < len(dims):
                raise SignatureError(
                    f"{what} {name!r}: dynamic dimension {index} does not exist; its "
                    f"dimensions without the batch are {dims} (counted from 0)"
                )
            dims[index] = -1
        specs.append(TensorSpec(name, dtype, tuple(dims)))
    return specs


def override(
    inferred: Sequence[TensorSpec], given: Sequence[TensorSpec] | None, *, what: str
) -> list[TensorSpec]:
    """The inferred signature, or the given one when it agrees with it (same names, in
    order; same dtypes; each given dimension -1 or equal to the example's)."""
    if given is None:
        return list(inferred)
    if [s.name for s in given] != [s.name for s in inferred]:
        raise SignatureError(
            f"the {what}s given are {[s.name for s in given]}, the model's are "
            f"{[s.name for s in inferred]}"
        )
    for mine, theirs in zip(given, inferred, strict=True):
        if mine.dtype != theirs.dtype:
            raise SignatureError(
                f"{what} {mine.name!r}: given as {mine.dtype}, the example is {theirs.dtype}"
            )
        fits = len(mine.shape) == len(theirs.shape) and all(
            g in (-1, t) or t == -1 for g, t in zip(mine.shape, theirs.shape, strict=True)
        )
        if not fits:
            raise SignatureError(
                f"{what} {mine.name!r}: given as {mine.describe()}, the example is "
                f"{theirs.describe()} (batch dimension left out)"
            )
    return list(given)

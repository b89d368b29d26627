"""The example batch `infless.package` runs, and the signature it gives.

`infer_inputs` takes `example_inputs` and the `inputs=` the user wrote. The examples are a
tensor, a tuple in the forward's order, or a dict by parameter name, batch dimension first.
`inputs=` holds specs or "name:dtype:shape" strings. It returns the examples by input name
with the input signature: inferred from the examples (`dynamic` marks dimensions of any
length), or given and checked. Without examples, `inputs=` alone is enough: examples are
made up (zeros for integers, a seeded normal for floats, `DYNAMIC_EXAMPLE_LENGTH` for a -1
dimension).

`name_outputs` names what the forward returned, and `infer_outputs` gives its signature.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from infless.packaging.signature import SignatureError, infer_specs, override, parse_spec
from infless.packaging.verify import PackagingError
from infless.types import TensorSpec

if TYPE_CHECKING:
    import torch

DYNAMIC_EXAMPLE_LENGTH = 8  # a -1 dimension of a made-up example (the worker warms up so)
EXAMPLE_BATCH = 2
SpecLike = TensorSpec | str


def _specs(given: Sequence[SpecLike] | None, what: str) -> list[TensorSpec] | None:
    if given is None:
        return None
    try:
        return [parse_spec(s) if isinstance(s, str) else s for s in given]
    except SignatureError as exc:
        raise PackagingError(f"{what}s: {exc}") from None


def _examples(
    example_inputs: Any, input_names: Sequence[str], given: list[TensorSpec] | None
) -> dict[str, torch.Tensor]:
    """The example batch by input name, in the forward's order."""
    import torch

    if example_inputs is None:
        if given is None:
            raise PackagingError(
                "give example_inputs (a batch the model takes), or inputs= with the signature"
            )
        return {spec.name: _made_up(spec) for spec in given}
    names = list(input_names)
    if isinstance(example_inputs, Mapping):
        examples = {str(k): _tensor(v) for k, v in example_inputs.items()}
        if names and set(examples) != set(names[: len(examples)]):
            raise PackagingError(
                f"example inputs {sorted(examples)} must be named as the forward's parameters "
                f"{names} (a worker passes them in that order)"
            )
        return {n: examples[n] for n in names if n in examples} if names else examples
    values = list(example_inputs) if isinstance(example_inputs, tuple | list) else [example_inputs]
    if given is not None and len(given) == len(values):
        names = [s.name for s in given]
    elif len(names) < len(values):
        names = [f"input{i}" for i in range(len(values))] if len(values) > 1 else ["input"]
    result = {name: _tensor(v) for name, v in zip(names, values, strict=False)}
    if not all(isinstance(v, torch.Tensor) for v in result.values()):
        raise PackagingError("example inputs must be tensors (or numpy arrays)")
    return result


def infer_inputs(
    example_inputs: Any,
    input_names: Sequence[str],
    inputs: Sequence[SpecLike] | None,
    dynamic: Mapping[str, Sequence[int]] | None,
) -> tuple[dict[str, torch.Tensor], list[TensorSpec]]:
    """The example batch by name, and the input signature (inferred, or given and checked)."""
    given_inputs = _specs(inputs, "input")
    examples = _examples(example_inputs, input_names, given_inputs)
    try:
        return examples, override(infer_specs(examples, dynamic), given_inputs, what="input")
    except SignatureError as exc:
        raise PackagingError(str(exc)) from None


def infer_outputs(
    produced: Mapping[str, torch.Tensor], outputs: Sequence[SpecLike] | None
) -> list[TensorSpec]:
    """The output signature: inferred from what the model produced, or given and checked (a
    bare name keeps the inferred dtype and shape)."""
    inferred = infer_specs(produced, what="output")
    given_outputs = None
    if outputs is not None:
        full = _specs([o for o in outputs if not isinstance(o, str) or ":" in o], "output") or []
        by_name = {spec.name: spec for spec in [*inferred, *full]}
        given_outputs = [by_name[spec.name] for spec in inferred]
    try:
        return override(inferred, given_outputs, what="output")
    except SignatureError as exc:
        raise PackagingError(str(exc)) from None


def _tensor(value: Any) -> torch.Tensor:
    import torch

    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value)
    raise PackagingError(f"an example input is a {type(value).__name__}, not a tensor")


def _made_up(spec: TensorSpec) -> torch.Tensor:
    import torch

    shape = [EXAMPLE_BATCH, *(DYNAMIC_EXAMPLE_LENGTH if d < 0 else d for d in spec.shape)]
    dtype = getattr(torch, spec.dtype)
    if dtype.is_floating_point:
        generator = torch.Generator().manual_seed(0)
        return torch.randn(shape, generator=generator).to(dtype)
    return torch.zeros(shape, dtype=dtype)


def name_outputs(raw: Any, outputs: Sequence[SpecLike] | None) -> dict[str, torch.Tensor]:
    """The forward's outputs by name: a dict's keys, else the given names, else `output`
    (`output0`, `output1`, ... for a tuple)."""
    import torch

    if isinstance(raw, Mapping):
        produced = {str(k): v for k, v in raw.items()}
    else:
        values = list(raw) if isinstance(raw, tuple | list) else [raw]
        names = [s if isinstance(s, str) else s.name for s in outputs or []]
        names = [n.split(":")[0] for n in names]
        if len(names) != len(values):
            if names:
                raise PackagingError(
                    f"the model returned {len(values)} outputs, outputs= names {len(names)}"
                )
            names = ["output"] if len(values) == 1 else [f"output{i}" for i in range(len(values))]
        produced = dict(zip(names, values, strict=True))
    for key, value in produced.items():
        if not isinstance(value, torch.Tensor):
            raise PackagingError(f"output {key!r} is a {type(value).__name__}, not a tensor")
    return {k: v.detach() for k, v in produced.items()}


def as_numpy(tensor: Any) -> np.ndarray:
    """A tensor as a contiguous numpy array on the CPU (what `verify_package` compares)."""
    return np.ascontiguousarray(tensor.detach().cpu().numpy())

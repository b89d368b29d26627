"""A model variant's transform, applied in the worker after the weights are attached.

Worker side (imports torch). `apply_transform(module, transform, manifest)` returns a module
callable like the original. It takes the same positional input tensors, in the signature's
dtypes. It gives the same outputs (a tensor, a tuple/list or a dict), floating outputs in
the signature's dtypes. The transforms (`PackageManifest.transform`):

- `bf16`: weights in bfloat16. Floating inputs are cast to bfloat16 on the way in (integer
  inputs such as token ids are untouched); floating outputs go back to the signature's dtype.
- `int8`: dynamic quantisation of the Linear/LSTM/GRU layers
  (`torch.ao.quantization.quantize_dynamic`: qint8 weights, activations quantised per batch).
- `channels-last`: 4-D weights and the 4-D floating inputs (batch + 3 dims) in NHWC order.
- `torchscript`: `torch.jit.trace` on an example batch of 2, then `torch.jit.freeze`. It is
  checked at batches 1 and 3 against the eager module, so a trace that baked its batch size
  in fails.
- `compile`: `torch.compile(dynamic=True)` (inductor). It is compiled here on example batches
  of 2 and 1 (one graph for batches above 1, one specialised for 1), so its load pays for it.

A transform that does not fit the model raises `TransformNotApplicable`: int8 without such a
layer, channels-last without an image-like input, anything on a TorchScript or exported
program. Anything else that goes wrong raises what it raised.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.jit._trace import TracerWarning

from infless.models.package import NO_TRANSFORM
from infless.models.programs import torchscript_deprecated

if TYPE_CHECKING:
    from infless.models.package import PackageManifest

ExampleInputs = Callable[[int], list[torch.Tensor]]
TRACE_BATCH = 2
CHECK_BATCHES = (1, 3)
EXAMPLE_DYNAMIC_LEN = 8  # a variable dimension's length in example batches


class TransformNotApplicable(ValueError):
    """The transform does not fit this model (not a failure of the transform itself)."""


def example_inputs(manifest: PackageManifest, batch_size: int) -> list[torch.Tensor]:
    """Zero-valued inputs of the signature (variable dims as 8): zeros are in range for
    token ids, and a traced graph does not depend on the values."""
    return [
        torch.zeros(
            (batch_size, *(EXAMPLE_DYNAMIC_LEN if d < 0 else d for d in spec.shape)),
            dtype=getattr(torch, spec.dtype),
        )
        for spec in manifest.inputs
    ]


class TransformedModule(nn.Module):
    """`inner` with its inputs converted on the way in and floating outputs restored to the
    signature's dtypes on the way out."""

    def __init__(
        self,
        inner: nn.Module,
        convert_input: Callable[[torch.Tensor], torch.Tensor],
        output_dtypes: dict[str, torch.dtype],
    ) -> None:
        super().__init__()
        self.inner = inner
        self._convert_input = convert_input
        self._output_dtypes = output_dtypes  # by output name; positions follow the manifest
        self._output_order = list(output_dtypes.values())

    def forward(self, *inputs: torch.Tensor) -> Any:
        raw = self.inner(*(self._convert_input(t) for t in inputs))
        if isinstance(raw, dict):
            return {k: self._restore(v, self._output_dtypes.get(k)) for k, v in raw.items()}
        if isinstance(raw, tuple | list):
            restored = [
                self._restore(v, self._output_order[i] if i < len(self._output_order) else None)
                for i, v in enumerate(raw)
            ]
            return type(raw)(restored)
        return self._restore(raw, self._output_order[0] if self._output_order else None)

    @staticmethod
    def _restore(value: Any, dtype: torch.dtype | None) -> Any:
        if not isinstance(value, torch.Tensor) or not value.is_floating_point():
            return value
        wanted = dtype if dtype is not None and dtype.is_floating_point else torch.float32
        return value if value.dtype == wanted else value.to(wanted)


def apply_transform(
    module: nn.Module,
    transform: str,
    manifest: PackageManifest,
    example_inputs_fn: ExampleInputs | None = None,
) -> nn.Module:
    """`module` (eval mode, weights attached) with `transform` applied (module docstring).

    `example_inputs_fn(batch_size)` gives example batches for tracing and compiling (default:
    zeros of the manifest's signature).
    """
    if transform in NO_TRANSFORM:
        return module
    examples = example_inputs_fn or (lambda b: example_inputs(manifest, b))
    output_dtypes = {s.name: getattr(torch, s.dtype) for s in manifest.outputs}
    module = module.eval()
    if transform == "bf16":
        return TransformedModule(module.to(torch.bfloat16), _to_bf16, output_dtypes)
    if transform == "int8":
        return TransformedModule(_quantised(module), _unchanged, output_dtypes)
    if transform == "channels-last":
        return TransformedModule(_channels_last(module, manifest), _nhwc, output_dtypes)
    if transform == "torchscript":
        return TransformedModule(_traced(module, examples), _unchanged, output_dtypes)
    if transform == "compile":
        return _compiled(module, examples)
    raise ValueError(f"unknown transform {transform!r}")


def _unchanged(tensor: torch.Tensor) -> torch.Tensor:
    return tensor


def _to_bf16(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.to(torch.bfloat16) if tensor.is_floating_point() else tensor


def _nhwc(tensor: torch.Tensor) -> torch.Tensor:
    if tensor.dim() == 4 and tensor.is_floating_point():
        return tensor.contiguous(memory_format=torch.channels_last)
    return tensor


QUANTISABLE = (nn.Linear, nn.LSTM, nn.GRU)


def _quantised(module: nn.Module) -> nn.Module:
    if not any(isinstance(m, QUANTISABLE) for m in module.modules()):
        raise TransformNotApplicable(
            "int8 dynamic quantisation: the model has no Linear/LSTM/GRU layer"
        )
    with _quiet():  # torch.ao.quantization is deprecated (in favour of torchao): it says so
        quantised: nn.Module = torch.ao.quantization.quantize_dynamic(  # type: ignore[no-untyped-call]
            module, set(QUANTISABLE), dtype=torch.qint8, inplace=True
        )
    return quantised


def _channels_last(module: nn.Module, manifest: PackageManifest) -> nn.Module:
    image_like = [
        s.name
        for s in manifest.inputs
        if len(s.shape) == 3 and getattr(torch, s.dtype).is_floating_point
    ]
    if not image_like:
        raise TransformNotApplicable(
            "channels-last: the model has no 4-D floating input (batch + 3 dims)"
        )
    converted: nn.Module = module.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    return converted


def _traced(module: nn.Module, examples: ExampleInputs) -> nn.Module:
    with torchscript_deprecated(), warnings.catch_warnings(), torch.no_grad():
        # "might not generalize to other inputs": the batches below check that it does
        warnings.simplefilter("ignore", TracerWarning)
        traced = torch.jit.trace(  # type: ignore[no-untyped-call]
            module, tuple(examples(TRACE_BATCH)), strict=False
        )
        frozen: nn.Module = torch.jit.freeze(traced.eval())
        for batch_size in CHECK_BATCHES:
            inputs = examples(batch_size)
            _check_same(batch_size, module(*inputs), frozen(*inputs))
    return frozen


def _check_same(batch_size: int, expected: Any, found: Any) -> None:
    """Raise unless the traced module's outputs have the eager ones' shapes and values."""
    wanted, answered = _flat(expected), _flat(found)
    if len(wanted) != len(answered):
        raise RuntimeError("torchscript: the traced module returns other outputs than the model")
    for want, got in zip(wanted, answered, strict=True):
        if want.shape != got.shape:
            raise RuntimeError(
                f"torchscript: the traced module answers a batch of {batch_size} with shape "
                f"{list(got.shape)}, the model with {list(want.shape)} (the trace baked its "
                f"batch of {TRACE_BATCH} in)"
            )
        if want.is_floating_point() and not torch.allclose(
            want.float(), got.float(), rtol=1e-3, atol=1e-3
        ):
            raise RuntimeError(
                f"torchscript: the traced module's outputs differ from the model's at a batch "
                f"of {batch_size} (a data-dependent branch was traced one way)"
            )


def _flat(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _flat(v)]
    if isinstance(value, tuple | list):
        return [t for v in value for t in _flat(v)]
    return []


def _compiled(module: nn.Module, examples: ExampleInputs) -> nn.Module:
    with _quiet():  # importing dynamo warns about TorchScript's deprecation, many times
        compiled = torch.compile(module, dynamic=True)
        with torch.inference_mode():  # as the worker serves: dynamo guards on grad mode
            for batch_size in (TRACE_BATCH, 1):
                compiled(*examples(batch_size))
    if not isinstance(compiled, nn.Module):  # torch.compile of a module gives a module
        raise TypeError(f"torch.compile returned {type(compiled).__name__}")
    return compiled


@contextmanager
def _quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", UserWarning)
        yield

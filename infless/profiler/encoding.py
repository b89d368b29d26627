"""Operator signatures from traced values: how arguments seen at two batch sizes become JSON.

Shared by both tracers (`extract` for torch.fx, `dispatch` for the fallback). A value seen at
trace batches 2 and 3 tells what grows with the batch: a tensor axis (stored per sample) or an
int argument (stored as {"b": k, "c": c}, meaning k x batch + c). Module operators also record
the constructor keywords that rebuild them. Imports torch; must not time anything.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from infless.profiler.graph import CostClass, OpNode, OpSignature, TensorInfo, canonical_params
from infless.profiler.targets import UnresolvableTarget, resolve_function, resolve_module_class

log = logging.getLogger(__name__)
TRACE_BATCHES = (2, 3)
_SKIP_INIT = {"self", "device", "dtype", "mode", "_weight", "_freeze"}


class Unencodable(Exception):
    """An argument the profiler cannot rebuild (a custom object): the op becomes opaque."""


@dataclass(frozen=True, slots=True)
class _T:
    """A tensor seen during a trace, reduced to what its signature needs."""

    shape: tuple[int, ...]
    dtype: str
    high: int | None
    order: tuple[int, ...] | None = None  # memory order of a permuted view (`TensorInfo`)


def memory_order(value: torch.Tensor) -> tuple[int, ...] | None:
    """The dims of `value` from outermost to innermost in memory, when it is a permuted view
    of a dense tensor (e.g. a transpose); None when contiguous or not dense (a slice)."""
    if value.dim() < 2 or value.is_contiguous():
        return None
    strides = value.stride()
    order = tuple(sorted(range(value.dim()), key=lambda d: (-strides[d], d)))
    if not value.permute(order).is_contiguous():
        return None
    return order


def summarize(value: object) -> object:
    if isinstance(value, torch.Tensor):
        dtype = str(value.dtype).removeprefix("torch.")
        high = None
        if not value.is_floating_point() and value.dtype != torch.bool and value.numel() > 0:
            high = int(value.max().item()) + 1
        return _T(tuple(int(d) for d in value.shape), dtype, high, memory_order(value))
    if isinstance(value, torch.Size):
        return tuple(int(d) for d in value)
    if isinstance(value, list | tuple):
        return type(value)(summarize(v) for v in value)
    if isinstance(value, dict):
        return {k: summarize(v) for k, v in value.items()}
    return value


def has_tensor(value: object) -> bool:
    if isinstance(value, _T):
        return True
    if isinstance(value, list | tuple):
        return any(has_tensor(v) for v in value)
    if isinstance(value, dict):
        return any(has_tensor(v) for v in value.values())
    return False


def _batch_int(small: int, large: int) -> object:
    b_small, b_large = TRACE_BATCHES
    if small == large:
        return small
    per_batch = (large - small) // (b_large - b_small)
    offset = small - per_batch * b_small
    return {"b": per_batch, "c": offset} if offset else {"b": per_batch}


def _tensor_info(small: _T, large: _T) -> TensorInfo:
    if len(small.shape) != len(large.shape):
        raise Unencodable(f"tensor rank changes with the batch: {small.shape} vs {large.shape}")
    axis = next(
        (i for i, (a, b) in enumerate(zip(small.shape, large.shape, strict=True)) if a != b), None
    )
    shape = list(small.shape)
    if axis is not None:
        b_small, b_large = TRACE_BATCHES
        shape[axis] = (large.shape[axis] - small.shape[axis]) // (b_large - b_small)
    highs = [h for h in (small.high, large.high) if h is not None]
    order = small.order if small.order == large.order else None
    return TensorInfo(tuple(shape), small.dtype, axis, max(highs) if highs else None, order)


def encode(  # noqa: PLR0911 - one return per encoded kind
    small: object, large: object, tensors: list[TensorInfo]
) -> object:
    """JSON form of an argument seen at both trace batches; tensors are appended to `tensors`."""
    if isinstance(small, _T) and isinstance(large, _T):
        tensors.append(_tensor_info(small, large))
        return {"t": len(tensors) - 1}
    if isinstance(small, bool) or small is None or isinstance(small, str | float):
        return small
    if isinstance(small, int) and isinstance(large, int):
        return _batch_int(small, large)
    if isinstance(small, list | tuple) and isinstance(large, list | tuple):
        if len(small) != len(large):
            raise Unencodable(f"sequence length changes with the batch: {small} vs {large}")
        items = [encode(a, b, tensors) for a, b in zip(small, large, strict=True)]
        return {"tuple": items} if isinstance(small, tuple) else {"list": items}
    if isinstance(small, dict) and isinstance(large, dict):
        return {"dict": {str(k): encode(v, large[k], tensors) for k, v in small.items()}}
    if isinstance(small, slice) and isinstance(large, slice):
        parts = zip(
            (small.start, small.stop, small.step),
            (large.start, large.stop, large.step),
            strict=True,
        )
        return {"slice": [encode(a, b, tensors) for a, b in parts]}
    if small is Ellipsis:
        return {"ellipsis": True}
    if isinstance(small, torch.dtype | torch.layout | torch.memory_format):
        return {"torch": str(small).removeprefix("torch.")}
    if isinstance(small, torch.device):
        return {"device": "cpu"}
    raise Unencodable(f"cannot rebuild an argument of type {type(small).__name__}")


def module_init_kwargs(module: nn.Module) -> dict[str, object]:
    """The constructor keywords that rebuild `module` (torch.nn classes), read from attributes."""
    cls = type(module)
    init: Callable[..., object] | None = None
    for klass in cls.__mro__:
        params = inspect.signature(klass.__init__).parameters.values()  # type: ignore[misc]
        if any(p.kind is p.POSITIONAL_OR_KEYWORD and p.name != "self" for p in params):
            init = klass.__init__  # type: ignore[misc]
            break
    kwargs: dict[str, object] = {}
    if init is None:
        return kwargs
    for param in inspect.signature(init).parameters.values():
        if param.name in _SKIP_INIT or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if param.name == "bias" and hasattr(module, "bias"):
            bias: object = getattr(module, "bias")  # noqa: B009 - typed as object on purpose
            kwargs["bias"] = bias if isinstance(bias, bool) else bias is not None
            continue
        if hasattr(module, param.name):
            value = getattr(module, param.name)
            try:
                kwargs[param.name] = encode(value, value, [])
            except Unencodable:
                if param.default is param.empty:
                    raise
            continue
        if param.default is param.empty:
            raise Unencodable(f"{cls.__name__}: cannot read constructor argument {param.name!r}")
    if isinstance(module, nn.RNN):
        kwargs["nonlinearity"] = module.nonlinearity
    return kwargs


def op_kind(target: str) -> str:
    name = target.split(":", 1)[1].rsplit(".", 1)[-1]
    return name.strip("_").lower() or name


def make_signature(
    target: str, init: dict[str, object] | None, args2: object, args3: object
) -> OpSignature:
    tensors: list[TensorInfo] = []
    encoded = encode(args2, args3, tensors)
    params: dict[str, object] = {"call": encoded}
    if init is not None:
        params["init"] = init
    return OpSignature(op_kind(target), target, canonical_params(params), tuple(tensors))


def classify(target: str, module: nn.Module | None, args: object, out: object) -> CostClass:
    if not (has_tensor(args) and has_tensor(out)):
        return "python"
    if target.endswith("operator.getitem") and isinstance(args, dict):
        container = args["args"][0] if args.get("args") else None
        if isinstance(container, list | tuple):
            return "python"  # indexing the tuple an LSTM or a split returns
    try:
        if module is not None:
            resolve_module_class(target)
        else:
            resolve_function(target)
    except UnresolvableTarget:
        return "opaque"
    return "compute"


def node_or_opaque(
    name: str,
    target: str,
    module: nn.Module | None,
    args: tuple[object, object],
    out: object,
    deps: tuple[str, ...],
) -> OpNode:
    cost_class = classify(target, module, args[0], out)
    try:
        init = module_init_kwargs(module) if module is not None else None
        signature = make_signature(target, init, args[0], args[1])
    except Unencodable as exc:
        log.warning("operator %s (%s) cannot be rebuilt alone: %s", name, target, exc)
        return OpNode(name, OpSignature(op_kind(target), target, "{}", ()), deps, "opaque")
    return OpNode(name, signature, deps, cost_class)


def function_target(func: Callable[..., object]) -> str | None:
    name = getattr(func, "__name__", "")
    qualname = getattr(func, "__qualname__", "")
    if qualname.split(".")[0] in ("TensorBase", "Tensor", "_TensorBase"):
        return f"method:{name}"
    if qualname.startswith("_VariableFunctionsClass."):
        return f"function:torch.{name}"
    module = getattr(func, "__module__", None)
    return f"function:{module}.{qualname}" if module and qualname else None

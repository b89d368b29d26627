"""Rebuild one operator alone from its signature: resolve its target, make its inputs.

Targets are resolved against an allow-list (torch functions and Tensor methods, torch.nn
module classes, the `operator` module), so a graph or database file cannot name arbitrary
code. Imports torch (profiler side only); must not time anything or touch the database.
"""

from __future__ import annotations

import importlib
import itertools
import json
import math
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from infless.models.kernels import prefer_onednn
from infless.profiler.graph import OpSignature, TensorInfo

_FUNCTION_MODULES = ("torch", "_operator", "operator", "math")
_BUILTINS = {"getattr", "len", "max", "min", "abs"}
MAX_COPIES = 64
INDEX_VARIANTS = 16  # sets of token ids an operator with integer inputs cycles through
# Inputs rotate through at least this many copies, however large: an input larger than the
# rotation, called in a loop, is read back from the LLC, where a model's activation that
# size has been evicted by its producer's own traffic (measured, one thread, SSD at b4: a
# ReLU over 11.5 MB took 120 us on one input, 290-306 us on 2-3 in turn, 310-340 us inside
# the model).
MIN_INPUT_COPIES = 2


class UnresolvableTarget(Exception):
    """A signature's target is not allowed or does not exist here."""


def _resolve_path(path: str) -> object:
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError as exc:
            raise UnresolvableTarget(f"{path}: {exc}") from None
        return obj
    raise UnresolvableTarget(f"{path}: no such module")


def resolve_function(target: str) -> Callable[..., Any]:
    """The callable for a "function:..." or "method:..." target."""
    kind, _, path = target.partition(":")
    if kind == "method":
        if not path or not hasattr(torch.Tensor, path):
            raise UnresolvableTarget(f"{target}: torch.Tensor has no method {path!r}")
        name = path

        def method(this: torch.Tensor, *args: object, **kwargs: object) -> object:
            return getattr(this, name)(*args, **kwargs)

        return method
    if kind != "function":
        raise UnresolvableTarget(f"{target}: not a function or method target")
    root = path.split(".")[0]
    if root == "builtins" and path.split(".")[-1] in _BUILTINS:
        return _resolve_checked(path)
    if root not in _FUNCTION_MODULES:
        raise UnresolvableTarget(f"{target}: only torch, operator and math functions are rebuilt")
    return _resolve_checked(path)


def _resolve_checked(path: str) -> Callable[..., Any]:
    obj = _resolve_path(path)
    if not callable(obj):
        raise UnresolvableTarget(f"{path} is not callable")
    return obj


def resolve_module_class(target: str) -> type[nn.Module]:
    kind, _, path = target.partition(":")
    if kind != "module" or not path.startswith("torch.nn."):
        raise UnresolvableTarget(f"{target}: only torch.nn module classes are rebuilt")
    cls = _resolve_path(path)
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise UnresolvableTarget(f"{target} is not an nn.Module class")
    return cls


def decode(  # noqa: PLR0911 - one return per encoded kind
    value: object, tensors: list[torch.Tensor], batch_size: int
) -> object:
    """The inverse of `extract.encode` at a batch size, with `tensors` for the {"t": i} slots."""
    if isinstance(value, list):
        return [decode(v, tensors, batch_size) for v in value]
    if not isinstance(value, dict):
        return value
    if "t" in value:
        return tensors[int(value["t"])]
    if "b" in value:
        return int(value["b"]) * batch_size + int(value.get("c", 0))
    if "tuple" in value:
        return tuple(decode(v, tensors, batch_size) for v in value["tuple"])
    if "list" in value:
        return [decode(v, tensors, batch_size) for v in value["list"]]
    if "dict" in value:
        return {k: decode(v, tensors, batch_size) for k, v in value["dict"].items()}
    if "slice" in value:
        start, stop, step = (decode(v, tensors, batch_size) for v in value["slice"])
        return slice(start, stop, step)
    if "ellipsis" in value:
        return Ellipsis
    if "torch" in value:
        attr = getattr(torch, str(value["torch"]))
        if not isinstance(attr, torch.dtype | torch.layout | torch.memory_format):
            raise UnresolvableTarget(f"torch.{value['torch']} is not a dtype, layout or format")
        return attr
    if "device" in value:
        return torch.device("cpu")
    raise UnresolvableTarget(f"unknown encoded argument {value!r}")


def make_tensor(info: TensorInfo, batch_size: int, gen: torch.Generator) -> torch.Tensor:
    """A random tensor as `info` describes it at `batch_size`, in its memory order."""
    shape = info.shape_at(batch_size)
    order = info.order
    if order is not None and sorted(order) == list(range(len(shape))):
        dense = make_tensor(
            TensorInfo(tuple(shape[d] for d in order), info.dtype, int_high=info.int_high),
            1,
            gen,
        )
        inverse = sorted(range(len(order)), key=order.__getitem__)
        return dense.permute(inverse)
    dtype = getattr(torch, info.dtype)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=gen).to(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool()
    return torch.randint(0, max(1, info.int_high or 2), shape, generator=gen, dtype=dtype)


@dataclass(frozen=True, slots=True)
class BuiltOperator:
    """An operator ready to run: `run()` calls it once, cycling over `copies` weight copies."""

    run: Callable[[], object]
    weight_bytes: int  # batch-independent bytes (weights, constants) of one copy
    copies: int


def _tensor_bytes(tensors: Iterable[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def copies_to_fill(rotate_bytes: int, one_copy_bytes: int) -> int:
    """How many copies of `one_copy_bytes` fill `rotate_bytes` (1 to MAX_COPIES)."""
    if rotate_bytes <= 0 or one_copy_bytes <= 0:
        return 1
    return max(1, min(MAX_COPIES, math.ceil(rotate_bytes / one_copy_bytes)))


def _is_index(info: TensorInfo) -> bool:
    """An integer tensor: ids or indices, whose values choose what the operator reads."""
    dtype = getattr(torch, info.dtype)
    return not dtype.is_floating_point and dtype != torch.bool


def build_operator(
    signature: OpSignature, batch_size: int, *, rotate_bytes: int = 0, rotate_input_bytes: int = 0
) -> BuiltOperator:
    """The operator at `batch_size` on random inputs.

    With `rotate_bytes`, enough copies of its weights to fill that many bytes are made and
    used in turn, so each call finds its weights out of the faster caches, as inside a model
    whose other operators ran in between. With `rotate_input_bytes`, its batched inputs
    (activations) cycle through copies filling that many bytes the same way, each with
    other values (at least `MIN_INPUT_COPIES`), and each result is kept alive for as many
    calls: inside a model an operator's input is a new tensor on every call, its output goes
    to a block freed some operators earlier, and a served model's inputs change from request
    to request (measured, SSD at b4 on one thread: its operators add up to 89.4 ms with
    results freed at once, 93.1 ms kept for two calls, 100 ms in the model; MobileNet-v1 at
    b8, ResNet-50 at b4 and BERT at b2: +0.2 %, +1.6 %, +0.4 %, each toward its model).
    One input in a loop would be read from L1/L2 and would let the branch predictor learn
    its data-dependent branches (a 2x2 max pool over 8x8x24x24 random maps: 53 us on one
    input, 140-170 us on 2-64 different ones in turn; mnist at b4 on one thread: 27-33 %
    slower on new images than on one).
    Integer inputs that grow with the batch (token ids) change from call to call too
    (`INDEX_VARIANTS` sets at least): a lookup repeated on the same ids would find its rows
    in L1/L2, a model's lookups do not.
    """
    is_module = signature.target.startswith("module:")
    cls = resolve_module_class(signature.target) if is_module else None
    func = None if is_module else resolve_function(signature.target)
    params = json.loads(signature.params)
    inputs = signature.inputs
    gen = torch.Generator().manual_seed(0)
    batched = {
        i: make_tensor(info, batch_size, gen)
        for i, info in enumerate(inputs)
        if info.batch_axis is not None
    }
    indices = [i for i in batched if _is_index(inputs[i])]
    input_copies = copies_to_fill(rotate_input_bytes, _tensor_bytes(batched.values()))
    if rotate_input_bytes > 0:  # never one input in a loop: a model's is never found there
        input_copies = max(MIN_INPUT_COPIES, input_copies)
    batch_sets = [batched] + [
        {
            **batched,
            **{
                i: make_tensor(inputs[i], batch_size, gen)
                for i in (batched if k < input_copies else indices)
            },
        }
        for k in range(1, max(input_copies, INDEX_VARIANTS if indices else 1))
    ]

    def weights() -> tuple[dict[int, torch.Tensor], nn.Module | None]:
        own = {
            i: make_tensor(info, batch_size, gen)
            for i, info in enumerate(inputs)
            if i not in batched
        }
        if cls is None:
            return own, None
        init = params.get("init", {})
        if not isinstance(init, dict):
            raise UnresolvableTarget(f"{signature.kind}: malformed constructor arguments")
        module = cls(**{k: decode(v, [], batch_size) for k, v in init.items()}).eval()
        prefer_onednn(module)  # the kernels a worker runs
        return own, module

    def bind(
        batch_inputs: dict[int, torch.Tensor],
        own: dict[int, torch.Tensor],
        module: nn.Module | None,
    ) -> Callable[[], object]:
        tensors = [batch_inputs[i] if i in batch_inputs else own[i] for i in range(len(inputs))]
        call = decode(params.get("call", {"args": [], "kwargs": {}}), tensors, batch_size)
        args = call.get("args", ()) if isinstance(call, dict) else None
        kwargs = call.get("kwargs", {}) if isinstance(call, dict) else None
        if not isinstance(args, tuple | list) or not isinstance(kwargs, dict):
            raise UnresolvableTarget(f"{signature.kind}: malformed call arguments")
        if module is not None:
            return lambda: module(*args, **kwargs)
        assert func is not None
        return lambda: func(*args, **kwargs)

    first = weights()
    own, module = first
    weight_bytes = _tensor_bytes(own.values())
    if module is not None:
        weight_bytes += _tensor_bytes([*module.parameters(), *module.buffers()])
    copies = copies_to_fill(rotate_bytes, weight_bytes)
    weight_sets = [first, *(weights() for _ in range(copies - 1))]
    variants = [
        bind(batch_sets[k % len(batch_sets)], *weight_sets[k % copies])
        for k in range(max(copies, len(batch_sets)))
    ]
    if len(variants) == 1:  # nothing rotates: inputs rotate through two copies at least
        return BuiltOperator(variants[0], weight_bytes, 1)
    calls = itertools.cycle(variants)
    # each result lives on for as many calls as there are input copies, so each call writes
    # to a block freed calls ago, not the one it freed a moment ago (still in L2)
    results: deque[object] = deque(maxlen=max(1, input_copies))

    def run_next() -> object:
        result = next(calls)()
        results.append(result)
        return result

    return BuiltOperator(run_next, weight_bytes, copies)

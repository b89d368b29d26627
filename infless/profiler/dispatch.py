"""The fallback tracer for models torch.fx cannot trace: record every torch call of eager runs.

A `TorchFunctionMode` sees each torch function, Tensor method and the functional form of leaf
modules once (calls nested inside a recorded call are not seen). Dependencies come from tensor
identity: an input produced by a recorded call depends on that call, so the result is a DAG,
not just a chain. Two runs (batch 2 and 3) must record the same operators. Imports torch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from infless.profiler.encoding import function_target, node_or_opaque, op_kind, summarize
from infless.profiler.graph import OpNode


@dataclass
class _Call:
    target: str
    args: object
    out: object
    deps: tuple[str, ...]


def _flat_tensors(value: object) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _flat_tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _flat_tensors(v)


class _DispatchRecorder(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[_Call] = []
        self._producer: dict[int, str] = {}
        self._keep: list[torch.Tensor] = []  # keeps ids unique while recording

    def __torch_function__(
        self,
        func: Callable[..., object],
        types: object,
        args: Sequence[object] = (),
        kwargs: dict[str, object] | None = None,
    ) -> object:
        kwargs = kwargs or {}
        call_args = {"args": summarize(tuple(args)), "kwargs": summarize(kwargs)}
        deps = tuple(
            dict.fromkeys(
                self._producer[id(t)]
                for t in _flat_tensors((args, kwargs))
                if id(t) in self._producer
            )
        )
        out = func(*args, **kwargs)
        target = function_target(func)
        if target is None or not any(True for _ in _flat_tensors(out)):
            return out
        name = f"{op_kind(target)}_{len(self.calls)}"
        self.calls.append(_Call(target, call_args, summarize(out), deps))
        for tensor in _flat_tensors(out):
            self._producer[id(tensor)] = name
            self._keep.append(tensor)
        return out


def trace_dispatch(
    model: nn.Module, inputs2: list[torch.Tensor], inputs3: list[torch.Tensor]
) -> tuple[list[OpNode], list[str]]:
    runs = []
    for inputs in (inputs2, inputs3):
        recorder = _DispatchRecorder()
        with torch.inference_mode(), recorder:
            model(*inputs)
        runs.append(recorder.calls)
    small, large = runs
    if [c.target for c in small] != [c.target for c in large]:
        raise ValueError("the model runs different operators at different batch sizes")
    nodes = []
    for i, (c2, c3) in enumerate(zip(small, large, strict=True)):
        name = f"{op_kind(c2.target)}_{i}"
        nodes.append(node_or_opaque(name, c2.target, None, (c2.args, c3.args), c2.out, c2.deps))
    used = {d for n in nodes for d in n.deps}
    return nodes, [n.name for n in nodes if n.name not in used][-1:]

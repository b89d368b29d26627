"""Graph extraction: a torch model -> its `OperatorGraph`, per sample.

Primary path: `torch.fx` symbolic tracing, then `ShapeProp` run at two batch sizes (2 and 3);
comparing the two runs tells which tensor axis and which integer arguments grow with the batch,
so signatures are stored per sample. Fallback for models fx cannot trace: a `TorchFunctionMode`
records every torch call of two eager runs (functions, Tensor methods, the functional form of
leaf modules) and recovers the dependencies from tensor identity, so the fallback still yields
a DAG, not just a chain.

Imports torch (worker/profiler side only). Must not measure time or touch the profile DB.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch
import torch.fx
from torch import nn
from torch.fx.passes.shape_prop import ShapeProp

from infless.profiler.dispatch import trace_dispatch
from infless.profiler.encoding import (
    TRACE_BATCHES,
    Unencodable,
    function_target,
    node_or_opaque,
    summarize,
)
from infless.profiler.graph import OperatorGraph, OpNode, Tracer
from infless.types import TensorSpec

log = logging.getLogger(__name__)


def example_inputs(
    specs: Sequence[TensorSpec],
    batch_size: int,
    *,
    int_high: int = 2,
    dynamic_len: int = 32,
    variant: int = 0,
) -> list[torch.Tensor]:
    """Random inputs for a signature (batch first); -1 dims become `dynamic_len`. Each
    `variant` draws other values."""
    gen = torch.Generator().manual_seed(batch_size + variant * 1_000_003)  # seeds: 32 bits
    tensors = []
    for spec in specs:
        shape = (batch_size, *(dynamic_len if d < 0 else d for d in spec.shape))
        dtype = getattr(torch, spec.dtype)
        if dtype.is_floating_point:
            tensors.append(torch.randn(shape, generator=gen).to(dtype))
        elif dtype == torch.bool:
            tensors.append(torch.randint(0, 2, shape, generator=gen).bool())
        else:
            tensors.append(torch.randint(0, int_high, shape, generator=gen, dtype=dtype))
    return tensors


def _count_module_calls(model: nn.Module, inputs: Sequence[torch.Tensor]) -> int:
    calls = 0

    def hook(_module: nn.Module, _args: object) -> None:
        nonlocal calls
        calls += 1

    handles = [m.register_forward_pre_hook(hook) for m in model.modules()]
    try:
        with torch.inference_mode():
            model(*inputs)
    finally:
        for handle in handles:
            handle.remove()
    return calls


class _Recorder(ShapeProp):
    """ShapeProp that also keeps every node's (summarised) value, tensors or not."""

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        super().__init__(gm)
        self.values: dict[str, object] = {}

    def run_node(self, n: torch.fx.Node) -> Any:
        result = super().run_node(n)
        self.values[n.name] = summarize(result)
        return result


def _fx_args(node: torch.fx.Node, values: dict[str, object]) -> object:
    def sub(arg: object) -> object:
        if isinstance(arg, torch.fx.Node):
            return values[arg.name]
        if isinstance(arg, list | tuple):
            return type(arg)(sub(a) for a in arg)
        if isinstance(arg, dict):
            return {k: sub(v) for k, v in arg.items()}
        if isinstance(arg, slice):
            return slice(sub(arg.start), sub(arg.stop), sub(arg.step))
        return arg

    return {"args": sub(tuple(node.args)), "kwargs": sub(dict(node.kwargs))}


def _fx_target(gm: torch.fx.GraphModule, node: torch.fx.Node) -> tuple[str, nn.Module | None]:
    if node.op == "call_module":
        module = gm.get_submodule(str(node.target))
        cls = type(module)
        return f"module:{cls.__module__}.{cls.__qualname__}", module
    if node.op == "call_method":
        return f"method:{node.target}", None
    target = node.target
    name = function_target(target) if callable(target) else None
    if name is None:
        raise Unencodable(f"call_function target {target!r} has no importable name")
    return name, None


def trace_fx(
    model: nn.Module, inputs2: list[torch.Tensor], inputs3: list[torch.Tensor]
) -> tuple[list[OpNode], list[str]]:
    gm = torch.fx.symbolic_trace(model)
    recorders = []
    with torch.inference_mode():
        for inputs in (inputs2, inputs3):
            recorder = _Recorder(gm)
            recorder.propagate(*inputs)
            recorders.append(recorder)
    ops = ("call_module", "call_function", "call_method")
    nodes: list[OpNode] = []
    outputs: list[str] = []
    for node in gm.graph.nodes:
        if node.op == "output":
            outputs = [n.name for n in node.all_input_nodes if n.op in ops]
        if node.op not in ops:
            continue
        target, module = _fx_target(gm, node)
        args = (_fx_args(node, recorders[0].values), _fx_args(node, recorders[1].values))
        deps = tuple(n.name for n in node.all_input_nodes if n.op in ops)
        nodes.append(
            node_or_opaque(node.name, target, module, args, recorders[0].values[node.name], deps)
        )
    return nodes, outputs


def streamed_weight_bytes(model: nn.Module) -> int:
    """Bytes of weights a forward reads in full: all but embedding tables (rows are looked up)."""
    skip = {id(p) for m in model.modules() if isinstance(m, nn.Embedding) for p in m.parameters()}
    tensors = [t for t in (*model.parameters(), *model.buffers()) if id(t) not in skip]
    return sum(t.numel() * t.element_size() for t in tensors)


def extract_graph(
    model: nn.Module,
    input_specs: Sequence[TensorSpec],
    *,
    model_key: str,
    tracer: Tracer | None = None,
    dynamic_len: int = 32,
    source_hash: str = "",
) -> OperatorGraph:
    """Trace `model` (in eval mode) into its operator graph; fx first unless `tracer` says."""
    model.eval()
    vocab = [m.num_embeddings for m in model.modules() if isinstance(m, nn.Embedding)]
    int_high = min(vocab) if vocab else 2
    inputs2, inputs3 = (
        example_inputs(input_specs, b, int_high=int_high, dynamic_len=dynamic_len)
        for b in TRACE_BATCHES
    )
    used: Tracer = "fx"
    if tracer in (None, "fx"):
        try:
            nodes, outputs = trace_fx(model, inputs2, inputs3)
        except Exception as exc:
            if tracer == "fx":
                raise
            log.warning(
                "%s: torch.fx cannot trace it (%s); using the dispatch tracer", model_key, exc
            )
            used = "dispatch"
    else:
        used = "dispatch"
    if used == "dispatch":
        nodes, outputs = trace_dispatch(model, inputs2, inputs3)
    total_calls = _count_module_calls(model, inputs2)
    leaf_calls = sum(1 for n in nodes if n.signature.target.startswith("module:"))
    return OperatorGraph(
        model_key=model_key,
        nodes=tuple(nodes),
        outputs=tuple(outputs),
        tracer=used,
        module_calls=max(0, total_calls - leaf_calls),
        source_hash=source_hash,
        weight_bytes=streamed_weight_bytes(model),
    )

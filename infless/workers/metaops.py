"""Optimus's five meta-operators on PyTorch modules, and a plan's execution.

- `replace(op, tensors)`: the operation keeps its shape; its weights become `tensors`,
  mapped from the store (nothing is copied).
- `reshape(op, props, tensors, dest)`: change its shape properties (kernel size, channels,
  features, hidden size...) in place, then give it the destination's tensors. Only what
  differs is touched; no new module is made.
- `reduce(ops, target)`: remove an operation; its tensors are unmapped with it.
- `add(dest, tensors)`: create an operation of the destination's type and properties on the
  meta device, and give it its tensors.
- `edge(nodes, ops)`: rebuild the data flow, the destination's fx graph over the operations
  (a `torch.fx.GraphModule`).

`execute_plan` runs a plan's steps (`transform.records.PlanStep`, as the worker protocol
carries them) on a model's operations. It returns the destination model, bit-equal to one
built fresh (same operations, same tensors, same graph), and the time each kind of
meta-operator took. Worker code: the gateway plans (`transform.planner`), the worker
executes. It imports torch and does no I/O beyond mapping store files.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import torch
import torch.fx
from torch import nn

from infless.clock import perf_s
from infless.transform.graphcode import decode_graph
from infless.transform.records import PlanStep
from infless.transform.structure import ModelStructure, Op


class TransformFailed(RuntimeError):
    """A plan could not be executed; the message names the step and why."""


def _set_tensor(module: nn.Module, name: str, tensor: torch.Tensor, buffer: bool) -> None:
    if buffer:
        module._buffers[name] = tensor
    else:
        module._parameters[name] = nn.Parameter(tensor, requires_grad=False)


def replace(module: nn.Module, tensors: Mapping[str, torch.Tensor], dest: Op) -> None:
    """Replace: the operation's tensors named in `tensors` become those (same shapes)."""
    buffers = {t.name for t in dest.tensors if t.buffer}
    for name, tensor in tensors.items():
        _set_tensor(module, name, tensor, name in buffers)


def _attribute(old: object, new: object) -> object:
    return tuple(new) if isinstance(new, list) and isinstance(old, tuple) else new


def reshape(
    module: nn.Module, props: Mapping[str, object], tensors: Mapping[str, torch.Tensor], dest: Op
) -> None:
    """Reshape: set the properties that differ, then the destination's tensors; tensors the
    destination operation does not have (a bias switched off) are dropped."""
    for key, value in props.items():
        if key == "bias":
            if not value:
                module._parameters["bias"] = None
            continue
        old = getattr(module, key, None)
        if old != value:
            setattr(module, key, _attribute(old, value))
    if isinstance(module, nn.modules.conv._ConvNd) and not isinstance(module.padding, str):
        padding = module.padding
        module._reversed_padding_repeated_twice = [p for p in reversed(padding) for _ in (0, 1)]
    wanted = {t.name for t in dest.tensors}
    for name in [n for n, p in module._parameters.items() if p is not None]:
        if name not in wanted:
            module._parameters[name] = None
    replace(module, tensors, dest)


def _module_class(kind: str) -> type[nn.Module]:
    module_name, _, name = kind.rpartition(".")
    if not module_name.startswith("torch.nn."):
        raise TransformFailed(f"Add: {kind} is not a torch.nn operation")
    cls = getattr(importlib.import_module(module_name), name, None)
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise TransformFailed(f"Add: {kind} is not a module class")
    return cls


def add(dest: Op, tensors: Mapping[str, torch.Tensor]) -> nn.Module:
    """Add: a new operation of the destination's type and properties, with its tensors."""
    if dest.props is None:
        raise TransformFailed(f"Add: {dest.target!r} has no readable properties")
    from infless.models.loader import skipped_init

    with torch.device("meta"), skipped_init():  # nothing to initialise: tensors come next
        module = _module_class(dest.kind)(**dest.props)
    replace(module, tensors, dest)
    still_meta = [n for n, t in (*module.named_parameters(), *module.named_buffers()) if t.is_meta]
    if still_meta:
        raise TransformFailed(f"Add: {dest.target!r} got no tensor for {still_meta}")
    return module.eval()


def reduce(ops: dict[str, nn.Module], target: str) -> None:
    """Reduce: the operation leaves the model (its tensors go with its last reference)."""
    ops.pop(target, None)


def _put(root: nn.Module, target: str, module: nn.Module) -> None:
    *path, name = target.split(".")
    parent = root
    for part in path:
        child = parent._modules.get(part)
        if child is None:
            child = nn.Module()
            parent._modules[part] = child
        parent = child
    parent._modules[name] = module


def edge(nodes: Sequence[Mapping[str, object]], ops: Mapping[str, nn.Module]) -> nn.Module:
    """Edge: the destination's data flow over `ops`, as a graph module in eval mode."""
    root = nn.Module()
    for target, module in ops.items():
        _put(root, target, module)
    graph_module = torch.fx.GraphModule(root, decode_graph(nodes))
    for target, module in ops.items():  # operations only read (get_attr) keep their type
        if graph_module.get_submodule(target) is not module:
            _put(graph_module, target, module)
    return graph_module.eval()


@dataclass(slots=True)
class Timings:
    """Milliseconds per meta-operator kind, and how many steps of each ran."""

    ms: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)

    def add(self, op: str, started_s: float) -> None:
        self.ms[op] = self.ms.get(op, 0.0) + (perf_s() - started_s) * 1000.0
        self.counts[op] = self.counts.get(op, 0) + 1


TensorSource = Callable[[str], torch.Tensor]  # destination state-dict name -> tensor


def execute_plan(
    model: nn.Module, dest: ModelStructure, steps: Sequence[PlanStep], tensor: TensorSource
) -> tuple[nn.Module, Timings]:
    """Run `steps` on `model`'s operations; the destination model and the time per kind."""
    current = dict(model.named_modules())
    by_target = {op.target: op for op in dest.ops}
    ops: dict[str, nn.Module] = {}
    timings = Timings()
    for step in steps:
        started = perf_s()
        try:
            if step.op == "edge":
                result = edge(dest.nodes, ops)
                timings.add("edge", started)
                return result, timings
            if step.op == "reduce":
                reduce(current, step.source)
                timings.add("reduce", started)
                continue
            op = by_target[step.target]
            prefix = f"{op.target}." if op.target else ""
            mapped = {name: tensor(prefix + name) for name in step.tensors}
            if step.op == "add":
                ops[op.target] = add(op, mapped)
            else:
                module = current.pop(step.source)
                if step.op == "replace":
                    replace(module, mapped, op)
                else:
                    reshape(module, op.props or {}, mapped, op)
                ops[op.target] = module
        except (KeyError, TypeError, ValueError, RuntimeError) as exc:
            raise TransformFailed(f"{step.op} {step.source or step.target!r}: {exc}") from exc
        timings.add(step.op, started)
    raise TransformFailed("the plan has no Edge step: the data flow was never rebuilt")

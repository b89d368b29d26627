"""Describe a model's structure for transformation: its operations and its fx graph.

`describe(module, model_key)` traces the module with `torch.fx`. A module built on the meta
device will do: nothing is computed. It lists the model's operations: the leaf modules the
graph calls or reads a tensor of, in first-use order. Each comes with its type, its
constructor properties (read back from the module's attributes by the names its `__init__`
takes) and its tensors. A model that fx cannot trace, or whose graph JSON cannot say, is
described as not transformable, with the reason.

`python -m infless.transform.describe PACKAGE_DIR...` prints each package's structure as a
line of JSON. The gateway runs it in a subprocess (it never imports torch) and caches them.
Build side (imports torch); no I/O but that command's stdout.
"""

from __future__ import annotations

import argparse
import inspect
import sys
from pathlib import Path

import torch
import torch.fx
from torch import nn

from infless.transform.graphcode import GraphNotDescribable, encode_graph
from infless.transform.structure import ModelStructure, Op, OpTensor

_SKIPPED_ARGS = frozenset({"self", "device", "dtype", "args", "kwargs"})


def _json_value(value: object) -> tuple[bool, object]:
    if value is None or isinstance(value, bool | int | float | str):
        return True, value
    if isinstance(value, tuple | list):
        items = [_json_value(v) for v in value]
        return all(ok for ok, _ in items), [v for _, v in items]
    return False, None


def module_props(module: nn.Module) -> dict[str, object] | None:
    """The constructor keyword arguments that rebuild `module`'s shape, read back from its
    attributes; None when one cannot be read as JSON (no Reshape or Add for it)."""
    try:
        params = inspect.signature(type(module).__init__).parameters
    except (TypeError, ValueError):
        return None
    props: dict[str, object] = {}
    for name, param in params.items():
        if name in _SKIPPED_ARGS or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if name == "bias" and isinstance(param.default, bool):
            props[name] = getattr(module, "bias", None) is not None
            continue
        if not hasattr(module, name):
            if param.default is inspect.Parameter.empty:
                return None  # a required argument it does not keep
            continue
        ok, value = _json_value(getattr(module, name))
        if not ok:
            return None
        props[name] = value
    return props


def describe_op(target: str, module: nn.Module) -> Op:
    """One leaf module as an operation: its type, properties and tensors."""
    kind = f"{type(module).__module__}.{type(module).__qualname__}"
    tensors = [
        OpTensor(n, tuple(t.shape), str(t.dtype).removeprefix("torch."))
        for n, t in module.named_parameters(recurse=False)
    ]
    persistent = [n for n in module._buffers if n not in module._non_persistent_buffers_set]
    tensors += [
        OpTensor(n, tuple(t.shape), str(t.dtype).removeprefix("torch."), buffer=True)
        for n, t in module.named_buffers(recurse=False)
        if n in persistent
    ]
    return Op(target, kind, module_props(module), tuple(tensors))


def describe(module: nn.Module, model_key: str) -> ModelStructure:
    try:
        graph_module = torch.fx.symbolic_trace(module)
    except Exception as exc:
        return ModelStructure.untransformable(model_key, f"fx cannot trace it: {exc}")
    modules = dict(module.named_modules())
    seen: dict[str, Op] = {}
    for node in graph_module.graph.nodes:
        if node.op == "call_module":
            owner = str(node.target)
        elif node.op == "get_attr":
            owner = str(node.target).rpartition(".")[0]
        else:
            continue
        owned = modules.get(owner)
        if owned is None or any(True for _ in owned.children()):
            reason = (
                f"node {node.name!r} reads {node.target!r} of a module that is not an operation"
            )
            return ModelStructure.untransformable(model_key, reason)
        if owner not in seen:
            seen[owner] = describe_op(owner, owned)
    try:
        nodes = encode_graph(graph_module.graph)
    except GraphNotDescribable as exc:
        return ModelStructure(
            model_key=model_key, ops=tuple(seen.values()), transformable=False, reason=str(exc)
        )
    return ModelStructure(model_key=model_key, ops=tuple(seen.values()), nodes=tuple(nodes))


def describe_package(package_dir: Path) -> ModelStructure:
    """A "module" package's structure, its model built on the meta device."""
    from infless.models.loader import build_module
    from infless.models.package import load_manifest
    from infless.models.programs import add_source_path

    manifest = load_manifest(package_dir)
    if manifest.format != "module":
        reason = f"a {manifest.format!r} program, not a module"
        return ModelStructure.untransformable(manifest.name, reason)
    add_source_path(package_dir)
    return describe(build_module(manifest, device="meta"), manifest.name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="print packages' model structures as JSON, one line per package"
    )
    parser.add_argument("package_dirs", type=Path, nargs="+")
    args = parser.parse_args(argv)
    for package_dir in args.package_dirs:
        sys.stdout.write(describe_package(package_dir).to_json() + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""A `torch.fx` graph to JSON and back: what Edge rebuilds the data flow from.

Each node becomes {"name", "op", "target", "args", "kwargs"}. A call_function target is
written as fx's qualified name (`torch.flatten`, `operator.add`) and resolved on the way
back only inside `_ALLOWED_MODULES` (torch, operator, builtins, math): a structure file
names functions, it cannot run code.
Arguments nest: a node reference is {"n": name}, a tuple {"t": [...]}, a slice
{"s": [start, stop, step]}, a dict {"d": {...}}, a dtype {"dtype": "float32"}, a device
{"device": "cpu"}, Ellipsis {"e": 1}; lists, numbers, strings, booleans and None are
themselves. Anything else cannot be described: `GraphNotDescribable` names it.

Build and worker side (imports torch). Owns no state.
"""

from __future__ import annotations

import builtins
import importlib
import inspect
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.fx
from torch.fx.node import _get_qualified_name

_ALLOWED_MODULES = ("torch", "operator", "_operator", "builtins", "math")
_EMPTY = inspect.Signature.empty


class GraphNotDescribable(ValueError):
    """The graph holds something JSON cannot say (the message names the node and value)."""


def _encode(value: object, where: str) -> object:  # noqa: PLR0911 - one case per kind
    if isinstance(value, torch.fx.Node):
        return {"n": value.name}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, tuple):
        return {"t": [_encode(v, where) for v in value]}
    if isinstance(value, list):
        return [_encode(v, where) for v in value]
    if isinstance(value, slice):
        return {"s": [_encode(v, where) for v in (value.start, value.stop, value.step)]}
    if isinstance(value, dict):
        return {"d": {str(k): _encode(v, where) for k, v in value.items()}}
    if isinstance(value, torch.dtype):
        return {"dtype": str(value).removeprefix("torch.")}
    if isinstance(value, torch.device):
        return {"device": str(value)}
    if value is Ellipsis:
        return {"e": 1}
    raise GraphNotDescribable(f"{where}: argument {value!r} ({type(value).__name__})")


def function_name(target: Any, where: str) -> str:
    """fx's qualified name of a call_function target (`torch.flatten`, `operator.add`,
    `getattr` for builtins), checked to be inside the allowed modules."""
    name: str = _get_qualified_name(target)
    if "." in name and name.split(".", maxsplit=1)[0] not in _ALLOWED_MODULES:
        raise GraphNotDescribable(f"{where}: function {name} is outside {_ALLOWED_MODULES}")
    return name


def encode_graph(graph: torch.fx.Graph) -> list[dict[str, object]]:
    nodes: list[dict[str, object]] = []
    for node in graph.nodes:
        where = f"node {node.name!r}"
        if node.op == "call_function":
            target: object = function_name(node.target, where)
        elif isinstance(node.target, str):
            target = node.target
        else:
            raise GraphNotDescribable(f"{where}: target {node.target!r}")
        nodes.append(
            {
                "name": node.name,
                "op": node.op,
                "target": target,
                "args": _encode(node.args, where),
                "kwargs": _encode(dict(node.kwargs), where),
            }
        )
    return nodes


def resolve_function(name: str) -> Any:
    """The function a qualified name names: the longest importable module prefix, then
    attributes (`torch.nn.functional.pad`); a name without a dot is a builtin."""
    parts = name.split(".")
    if len(parts) == 1:
        return getattr(builtins, name)
    if parts[0] not in _ALLOWED_MODULES:
        raise GraphNotDescribable(f"function {name!r} is outside {_ALLOWED_MODULES}")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            value: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:]:
            value = getattr(value, part)
        return value
    raise GraphNotDescribable(f"function {name!r} cannot be found")


def _decode(value: object, env: Mapping[str, torch.fx.Node]) -> Any:  # noqa: PLR0911
    if isinstance(value, list):
        return [_decode(v, env) for v in value]
    if not isinstance(value, dict):
        return value
    if "n" in value:
        return env[str(value["n"])]
    if "t" in value:
        return tuple(_decode(v, env) for v in _seq(value["t"]))
    if "s" in value:
        start, stop, step = (_decode(v, env) for v in _seq(value["s"]))
        return slice(start, stop, step)
    if "d" in value:
        items = value["d"]
        assert isinstance(items, dict)
        return {k: _decode(v, env) for k, v in items.items()}
    if "dtype" in value:
        return getattr(torch, str(value["dtype"]))
    if "device" in value:
        return torch.device(str(value["device"]))
    if "e" in value:
        return Ellipsis
    raise GraphNotDescribable(f"unknown argument encoding {value!r}")


def _seq(value: object) -> Sequence[object]:
    if not isinstance(value, list):
        raise GraphNotDescribable(f"expected a list, got {value!r}")
    return value


def decode_graph(nodes: Sequence[Mapping[str, object]]) -> torch.fx.Graph:
    """The fx graph the JSON nodes describe (names kept, so generated code is the same)."""
    graph = torch.fx.Graph()
    env: dict[str, torch.fx.Node] = {}
    for item in nodes:
        op, name, target = str(item["op"]), str(item["name"]), item["target"]
        args = _decode(item["args"], env)
        kwargs = _decode(item["kwargs"], env)
        if op == "placeholder":
            node = graph.placeholder(str(target), default_value=args[0] if args else _EMPTY)
        elif op == "output":
            node = graph.output(args[0])
        elif op == "get_attr":
            node = graph.get_attr(str(target))
        elif op == "call_module":
            node = graph.call_module(str(target), tuple(args), kwargs)
        elif op == "call_method":
            node = graph.call_method(str(target), tuple(args), kwargs)
        elif op == "call_function":
            node = graph.call_function(resolve_function(str(target)), tuple(args), kwargs)
        else:
            raise GraphNotDescribable(f"node {name!r}: unknown op {op!r}")
        node.name = name
        env[name] = node
    return graph

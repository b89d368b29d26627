"""What the user gave `infless.package` as the model, sorted out.

`sort_out_model` takes one of:

- an `nn.Module` instance, a builder (a function or class returning one) or its import path
  `"module:callable"`: format "module", built here with `arch_kwargs` and recorded by import
  path;
- a TorchScript module or `.pt` file: format "torchscript";
- a `torch.export` program or `.pt2` file: format "export".

It says which module runs here, how a worker gets it, and the forward's input names.
`read_weights` reads `weights=`: a state dict, a `.safetensors` file, or a `torch.save`d
state dict or training checkpoint. `load_weights` fits it to the module. Whatever cannot be
packaged is a PackagingError that says why and what to do; `step` turns any other failure
into one.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infless.models.programs import torchscript_deprecated
from infless.packaging.verify import PackagingError


@dataclass
class GivenModel:
    """What was given, sorted out: the module to run here and how a worker gets it."""

    module: Any  # nn.Module, ScriptModule or the exported program's module
    format: str  # "module" | "torchscript" | "export"
    architecture: str  # "module:callable" (format "module")
    program: Any = None  # the ScriptModule / ExportedProgram, or the file they came from
    input_names: list[str] = field(default_factory=list)


def step(what: str, action: Callable[[], Any]) -> Any:
    """`action()`, its failure a PackagingError saying what was being done."""
    try:
        return action()
    except PackagingError:
        raise
    except Exception as exc:
        raise PackagingError(f"{what}: {type(exc).__name__}: {exc}") from exc


def import_path(obj: Any, what: str) -> str:
    """`module:qualname` of a class or function, refusing what a worker cannot import."""
    if isinstance(obj, str):
        if ":" not in obj:
            raise PackagingError(f"{what} {obj!r}: expected 'module:callable'")
        return obj
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not module or not qualname:
        raise PackagingError(f"{what} {obj!r} has no importable name")
    if module == "__main__":
        raise PackagingError(
            f"{what} {qualname} is defined in __main__ (your script); a worker cannot import "
            "it: move it into a module (e.g. mymodel.py) and import it from there"
        )
    if "<locals>" in qualname:
        raise PackagingError(
            f"{what} {qualname} is defined inside a function; define it at a module's top level"
        )
    return f"{module}:{qualname}"


def _resolve(path: str) -> Any:
    module_name, _, attribute = path.partition(":")
    module = step(f"importing {module_name}", lambda: importlib.import_module(module_name))
    target: Any = module
    for part in attribute.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise PackagingError(f"{path}: {module_name} has no {attribute!r}")
    return target


def sort_out_model(model: Any, kwargs: dict[str, Any]) -> GivenModel:
    """The module `model` names (a builder is called with `kwargs`) and how a worker gets it."""
    import torch
    from torch import nn

    if isinstance(model, str | Path) and Path(model).suffix in (".pt", ".pt2", ".ts"):
        return _program_file(Path(model))
    if isinstance(model, torch.jit.ScriptModule):
        return GivenModel(model.eval(), "torchscript", "", model, _script_inputs(model))
    if isinstance(model, torch.export.ExportedProgram):
        return GivenModel(model.module(), "export", "", model, _export_inputs(model))
    if isinstance(model, nn.Module):
        architecture = import_path(type(model), "the model class")
        return GivenModel(model.eval(), "module", architecture, input_names=_forward_names(model))
    if isinstance(model, str):
        architecture = import_path(model, "the architecture")
        builder = _resolve(architecture)
    elif callable(model):
        architecture = import_path(model, "the builder")
        builder = model
    else:
        raise PackagingError(
            f"cannot package a {type(model).__name__}: give an nn.Module, a builder, "
            "'module:callable', a TorchScript module/.pt file or a torch.export program/.pt2"
        )
    module = step(f"building {architecture}(**{kwargs})", lambda: builder(**kwargs))
    if not isinstance(module, nn.Module):
        raise PackagingError(f"{architecture} returned {type(module).__name__}, not an nn.Module")
    return GivenModel(module.eval(), "module", architecture, input_names=_forward_names(module))


def _program_file(path: Path) -> GivenModel:
    import torch

    if not path.is_file():
        raise PackagingError(f"{path}: no such file")
    if path.suffix == ".pt2":
        program = step(f"loading {path} with torch.export.load", lambda: torch.export.load(path))
        return GivenModel(program.module(), "export", "", path, _export_inputs(program))
    with torchscript_deprecated():
        script = step(
            f"loading {path} as TorchScript (a state dict goes in weights=, with its architecture)",
            lambda: torch.jit.load(str(path), map_location="cpu"),  # type: ignore[no-untyped-call]
        )
    return GivenModel(script.eval(), "torchscript", "", path, _script_inputs(script))


def _forward_names(module: Any) -> list[str]:
    try:
        parameters = inspect.signature(module.forward).parameters.values()
    except (TypeError, ValueError):
        return []
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p.name for p in parameters if p.kind in kinds]


def _script_inputs(script: Any) -> list[str]:
    try:
        return [a.name for a in script.forward.schema.arguments[1:]]
    except AttributeError:
        return []


def _export_inputs(program: Any) -> list[str]:
    return [str(n) for n in program.graph_signature.user_inputs]


# -- weights -------------------------------------------------------------------------------


def read_weights(weights: Mapping[str, Any] | str | Path) -> Mapping[str, Any]:
    """`weights=` as a state dict: given, or read from a `.safetensors` or `torch.save` file."""
    import torch

    if isinstance(weights, Mapping):
        return weights
    path = Path(weights)
    if not path.is_file():
        raise PackagingError(f"weights {path}: no such file")
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return dict(step(f"reading {path}", lambda: load_file(str(path))))
    loaded = step(
        f"reading {path} (torch.load, weights only)",
        lambda: torch.load(path, map_location="cpu", weights_only=True),
    )
    if isinstance(loaded, Mapping) and isinstance(loaded.get("state_dict"), Mapping):
        loaded = loaded["state_dict"]  # a training checkpoint
    if not isinstance(loaded, Mapping) or not all(
        isinstance(v, torch.Tensor) for v in loaded.values()
    ):
        raise PackagingError(
            f"{path} does not hold a state dict (name -> tensor); save one with "
            "torch.save(model.state_dict(), path)"
        )
    return loaded


def load_weights(module: Any, state: Mapping[str, Any]) -> None:
    """Load `state` into `module`, strictly: every tensor named, none left over."""
    own = set(module.state_dict())
    missing, extra = sorted(own - set(state)), sorted(set(state) - own)
    if missing or extra:
        parts = [f"missing tensors {missing[:5]}"] * bool(missing)
        parts += [f"extra tensors {extra[:5]}"] * bool(extra)
        raise PackagingError(f"the weights do not fit the architecture: {'; '.join(parts)}")
    step("loading the weights", lambda: module.load_state_dict(state, strict=True))

"""`infless.package(...)`: a user's PyTorch model -> a function package a gateway can serve.

What it takes (`model`):

- an `nn.Module` instance, a builder (a function or class returning one) or its import path
  `"module:callable"`: the package records the import path and `arch_kwargs`, carries the
  module's source (`source`), and stores the weights (the instance's, the builder's, or
  `weights=`: a state dict, a `.safetensors` or a `torch.save`d state-dict file) as
  safetensors — served from the shared tensor store, built on `meta` in the worker;
- a TorchScript module or file (`.pt`), or a `torch.export` program or file (`.pt2`): the
  program is the package (loaded whole by each worker).

The signature comes from `example_inputs` (a tensor, a tuple in the forward's order, or a
dict by parameter name; batch dimension first) and the outputs the model gives for them;
`dynamic` marks dimensions of any length, and `inputs=`/`outputs=` override what was inferred
(names, or -1 dimensions). Without examples, `inputs=` alone is enough: examples are made up
(zeros for integers, a seeded normal for floats, 8 for a -1 dimension). A `handler`
(`"module:Class"` or the class) runs around the forward in the worker (`infless.handlers`).

The package is written to a staging directory beside `out`, checked the way a worker will
load it (`verify`, unless `verify=False`), given its content digest, and only then moved to
`out`. Everything wrong — a class defined in `__main__`, tensors that do not fit, a forward
that fails — is a PackagingError naming the problem and the fix.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import inspect
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np

from infless.models.package import (
    MANIFEST_FILE,
    POSTPROCESS_NAMES,
    SOURCE_DIR,
    WEIGHTS_FILE,
    PackageManifest,
    TensorSignature,
    encode_manifest,
)
from infless.packaging.digest import write_digest
from infless.packaging.signature import (
    SignatureError,
    dtype_name,
    infer_specs,
    override,
    parse_spec,
)
from infless.packaging.source import plan_sources
from infless.packaging.verify import PackagingError, Verified, verify_package
from infless.types import TensorSpec
from infless.workers.model import torchscript_deprecated

if TYPE_CHECKING:
    import torch

TORCHSCRIPT_FILE = "model.torchscript.pt"
EXPORT_FILE = "model.pt2"
DYNAMIC_EXAMPLE_LENGTH = 8  # a -1 dimension of a made-up example (the worker warms up so)
EXAMPLE_BATCH = 2
SpecLike = TensorSpec | str


@dataclass(frozen=True)
class PackageInfo:
    """A package written: where, its digest, manifest, and what packaging found."""

    path: Path
    digest: str
    manifest: PackageManifest
    source_files: list[str] = field(default_factory=list)
    unresolved_imports: list[str] = field(default_factory=list)
    verified: Verified | None = None


@dataclass
class _Model:
    """What was given, sorted out: the module to run here and how a worker gets it."""

    module: Any  # nn.Module, ScriptModule or the exported program's module
    format: str  # "module" | "torchscript" | "export"
    architecture: str  # "module:callable" (format "module")
    program: Any = None  # the ScriptModule / ExportedProgram, or the file they came from
    input_names: list[str] = field(default_factory=list)


def package(
    model: Any,
    example_inputs: Any = None,
    *,
    name: str,
    out: str | Path,
    handler: str | type | None = None,
    arch_kwargs: Mapping[str, Any] | None = None,
    weights: Mapping[str, Any] | str | Path | None = None,
    inputs: Sequence[SpecLike] | None = None,
    outputs: Sequence[SpecLike] | None = None,
    dynamic: Mapping[str, Sequence[int]] | None = None,
    files: Sequence[str | Path] = (),
    postprocess: str | None = None,
    description: str = "",
    provenance: str = "infless.package",
    example_request: bytes | str | None = None,
    example_content_type: str = "text/plain",
    verify: bool = True,
) -> PackageInfo:
    """Write a function package for `model` to `out` (see the module docstring)."""
    import torch

    kwargs = dict(arch_kwargs or {})
    given = _model(model, kwargs)
    if weights is not None:
        if given.format != "module":
            raise PackagingError("weights= is for a module; a program carries its own weights")
        _load_weights(given.module, _read_weights(weights))
    if postprocess is not None and postprocess not in POSTPROCESS_NAMES:
        raise PackagingError(
            f"postprocess {postprocess!r} is unknown; use one of {sorted(POSTPROCESS_NAMES)}"
        )
    examples, input_specs = _inputs(example_inputs, given, inputs, dynamic)
    with torch.inference_mode():
        raw = _step("the forward on the example", lambda: given.module(*examples.values()))
    produced = _name_outputs(raw, outputs)
    output_specs = _outputs(produced, outputs)
    handler_path = None if handler is None else _import_path(handler, "the handler")
    roots = [given.architecture.partition(":")[0]] if given.format == "module" else []
    roots += [] if handler_path is None else [handler_path.partition(":")[0]]
    plan = plan_sources(roots)
    target = Path(out).expanduser().resolve()
    with _staging(target) as staging:
        manifest = _write(
            staging,
            given,
            name=name,
            kwargs=kwargs,
            input_specs=input_specs,
            output_specs=output_specs,
            handler=handler_path,
            requirements=plan.requirements,
            postprocess=postprocess,
            description=description,
            provenance=provenance,
        )
        for relative, source in plan.files.items():
            destination = staging / SOURCE_DIR / relative
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, destination)
        for extra in files:
            _copy_into(Path(extra), staging)
        verified = None
        if verify:
            request = None
            if example_request is not None:
                body = example_request
                request = (body.encode() if isinstance(body, str) else body, example_content_type)
            expected = {k: _numpy(v) for k, v in produced.items()}
            verified = verify_package(
                staging, {k: _numpy(v) for k, v in examples.items()}, expected, request
            )
        digest = write_digest(staging)
        _swap(staging, target)
    manifest = msgspec.structs.replace(manifest, digest=digest)
    return PackageInfo(target, digest, manifest, sorted(plan.files), plan.unresolved, verified)


# -- sorting out the model ---------------------------------------------------------------


def _step(step: str, action: Callable[[], Any]) -> Any:
    try:
        return action()
    except PackagingError:
        raise
    except Exception as exc:
        raise PackagingError(f"{step}: {type(exc).__name__}: {exc}") from exc


def _import_path(obj: Any, what: str) -> str:
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
    module = _step(f"importing {module_name}", lambda: importlib.import_module(module_name))
    target: Any = module
    for part in attribute.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise PackagingError(f"{path}: {module_name} has no {attribute!r}")
    return target


def _model(model: Any, kwargs: dict[str, Any]) -> _Model:
    import torch
    from torch import nn

    if isinstance(model, str | Path) and Path(model).suffix in (".pt", ".pt2", ".ts"):
        return _program_file(Path(model))
    if isinstance(model, torch.jit.ScriptModule):
        return _Model(model.eval(), "torchscript", "", model, _script_inputs(model))
    if isinstance(model, torch.export.ExportedProgram):
        return _Model(model.module(), "export", "", model, _export_inputs(model))
    if isinstance(model, nn.Module):
        architecture = _import_path(type(model), "the model class")
        return _Model(model.eval(), "module", architecture, input_names=_forward_names(model))
    if isinstance(model, str):
        architecture = _import_path(model, "the architecture")
        builder = _resolve(architecture)
    elif callable(model):
        architecture = _import_path(model, "the builder")
        builder = model
    else:
        raise PackagingError(
            f"cannot package a {type(model).__name__}: give an nn.Module, a builder, "
            "'module:callable', a TorchScript module/.pt file or a torch.export program/.pt2"
        )
    module = _step(f"building {architecture}(**{kwargs})", lambda: builder(**kwargs))
    if not isinstance(module, nn.Module):
        raise PackagingError(f"{architecture} returned {type(module).__name__}, not an nn.Module")
    return _Model(module.eval(), "module", architecture, input_names=_forward_names(module))


def _program_file(path: Path) -> _Model:
    import torch

    if not path.is_file():
        raise PackagingError(f"{path}: no such file")
    if path.suffix == ".pt2":
        program = _step(f"loading {path} with torch.export.load", lambda: torch.export.load(path))
        return _Model(program.module(), "export", "", path, _export_inputs(program))
    with torchscript_deprecated():
        script = _step(
            f"loading {path} as TorchScript (a state dict goes in weights=, with its architecture)",
            lambda: torch.jit.load(str(path), map_location="cpu"),  # type: ignore[no-untyped-call]
        )
    return _Model(script.eval(), "torchscript", "", path, _script_inputs(script))


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


def _read_weights(weights: Mapping[str, Any] | str | Path) -> Mapping[str, Any]:
    import torch

    if isinstance(weights, Mapping):
        return weights
    path = Path(weights)
    if not path.is_file():
        raise PackagingError(f"weights {path}: no such file")
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return dict(_step(f"reading {path}", lambda: load_file(str(path))))
    loaded = _step(
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


def _load_weights(module: Any, state: Mapping[str, Any]) -> None:
    own = set(module.state_dict())
    missing, extra = sorted(own - set(state)), sorted(set(state) - own)
    if missing or extra:
        parts = [f"missing tensors {missing[:5]}"] * bool(missing)
        parts += [f"extra tensors {extra[:5]}"] * bool(extra)
        raise PackagingError(f"the weights do not fit the architecture: {'; '.join(parts)}")
    _step("loading the weights", lambda: module.load_state_dict(state, strict=True))


def _state_to_save(module: Any) -> dict[str, Any]:
    """The state dict, contiguous, with tensors that share storage (tied weights) copied:
    safetensors stores each tensor on its own."""
    own = set(module.state_dict())
    transient = sorted({n for n, _ in module.named_buffers()} - own)
    if transient:
        raise PackagingError(
            f"non-persistent buffers {transient[:5]} cannot be restored in a worker (it builds "
            "the model on meta and attaches the saved tensors): register them with "
            "persistent=True, or compute them in forward"
        )
    seen: set[int] = set()
    state = {}
    for key, tensor in module.state_dict().items():
        data = tensor.detach()
        pointer = data.untyped_storage().data_ptr()
        state[key] = data.clone().contiguous() if pointer in seen else data.contiguous()
        seen.add(pointer)
    return state


# -- examples and signatures ----------------------------------------------------------------


def _specs(given: Sequence[SpecLike] | None, what: str) -> list[TensorSpec] | None:
    if given is None:
        return None
    try:
        return [parse_spec(s) if isinstance(s, str) else s for s in given]
    except SignatureError as exc:
        raise PackagingError(f"{what}s: {exc}") from None


def _examples(
    example_inputs: Any, model: _Model, given: list[TensorSpec] | None
) -> dict[str, torch.Tensor]:
    """The example batch by input name, in the forward's order."""
    import torch

    if example_inputs is None:
        if given is None:
            raise PackagingError(
                "give example_inputs (a batch the model takes), or inputs= with the signature"
            )
        return {spec.name: _made_up(spec) for spec in given}
    names = model.input_names
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


def _inputs(
    example_inputs: Any,
    given: _Model,
    inputs: Sequence[SpecLike] | None,
    dynamic: Mapping[str, Sequence[int]] | None,
) -> tuple[dict[str, torch.Tensor], list[TensorSpec]]:
    """The example batch by name, and the input signature (inferred, or given and checked)."""
    given_inputs = _specs(inputs, "input")
    examples = _examples(example_inputs, given, given_inputs)
    try:
        return examples, override(infer_specs(examples, dynamic), given_inputs, what="input")
    except SignatureError as exc:
        raise PackagingError(str(exc)) from None


def _outputs(
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


def _name_outputs(raw: Any, outputs: Sequence[SpecLike] | None) -> dict[str, torch.Tensor]:
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


def _numpy(tensor: Any) -> np.ndarray:
    return np.ascontiguousarray(tensor.detach().cpu().numpy())


# -- writing -------------------------------------------------------------------------------


def _signature(specs: Sequence[TensorSpec]) -> list[TensorSignature]:
    return [TensorSignature(s.name, dtype_name(s.dtype), list(s.shape)) for s in specs]


def _write(
    directory: Path,
    given: _Model,
    *,
    name: str,
    kwargs: dict[str, Any],
    input_specs: Sequence[TensorSpec],
    output_specs: Sequence[TensorSpec],
    handler: str | None,
    requirements: list[str],
    postprocess: str | None,
    description: str,
    provenance: str,
) -> PackageManifest:
    import torch

    weights_sha256, weights_bytes, program_file = "", 0, ""
    architecture = given.architecture
    if given.format == "module":
        from safetensors.torch import save_file

        weights = directory / WEIGHTS_FILE
        save_file(_state_to_save(given.module), str(weights))
        weights.chmod(0o644)  # safetensors writes 0600; workers read packages
        with weights.open("rb") as handle:
            weights_sha256 = hashlib.file_digest(handle, "sha256").hexdigest()
        weights_bytes = weights.stat().st_size
    else:
        program_file = TORCHSCRIPT_FILE if given.format == "torchscript" else EXPORT_FILE
        architecture = given.format
        destination = directory / program_file
        if isinstance(given.program, Path):
            shutil.copyfile(given.program, destination)
        elif given.format == "torchscript":
            with torchscript_deprecated():
                torch.jit.save(given.program, str(destination))
        else:
            torch.export.save(given.program, destination)
    try:
        json_kwargs = msgspec.json.decode(msgspec.json.encode(kwargs))
    except (TypeError, msgspec.EncodeError) as exc:
        raise PackagingError(f"arch_kwargs must be JSON values: {exc}") from None
    manifest = PackageManifest(
        name=name,
        architecture=architecture,
        arch_kwargs=json_kwargs,
        inputs=_signature(input_specs),
        outputs=_signature(output_specs),
        weights_sha256=weights_sha256,
        weights_bytes=weights_bytes,
        postprocess=postprocess,
        description=description,
        provenance=provenance,
        format=given.format,  # type: ignore[arg-type]
        program_file=program_file,
        handler=handler,
        requirements=requirements,
    )
    (directory / MANIFEST_FILE).write_bytes(encode_manifest(manifest) + b"\n")
    return manifest


def _copy_into(path: Path, directory: Path) -> None:
    if not path.exists():
        raise PackagingError(f"files: {path} does not exist")
    destination = directory / path.name
    if destination.exists():
        raise PackagingError(f"files: {path.name} would overwrite the package's own file")
    if path.is_dir():
        shutil.copytree(path, destination, symlinks=False)
    else:
        shutil.copyfile(path, destination)


@contextlib.contextmanager
def _staging(target: Path) -> Iterator[Path]:
    if target.exists() and not (
        (target / MANIFEST_FILE).is_file() or (target.is_dir() and not any(target.iterdir()))
    ):
        raise PackagingError(
            f"{target} exists and is not a function package: refusing to replace it"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.staging-", dir=target.parent))
    try:
        staging.chmod(0o755)  # workers read packages
        yield staging
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _swap(staging: Path, target: Path) -> None:
    """Replace `target` with `staging` (the old package is moved aside, then removed)."""
    old = None
    if target.exists():
        old = target.with_name(f".{target.name}.old-{staging.name.rsplit('-', 1)[-1]}")
        target.rename(old)
    staging.rename(target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)

"""`infless.package(...)`: a user's PyTorch model -> a function package a gateway can serve.

What it takes (`model`):

- an `nn.Module` instance, a builder (a function or class returning one) or its import path
  `"module:callable"`. The package records the import path and `arch_kwargs` and carries the
  module's source (`source`). It stores the weights as safetensors: the instance's, the
  builder's, or `weights=` (a state dict, a `.safetensors` or a `torch.save`d state-dict
  file). They are served from the shared tensor store, and the worker builds on `meta`.
- a TorchScript module or file (`.pt`), or a `torch.export` program or file (`.pt2`). The
  program is the package, loaded whole by each worker.

The signature comes from `example_inputs` and the outputs the model gives for them. The
examples are a tensor, a tuple in the forward's order, or a dict by parameter name, batch
dimension first. `dynamic` marks dimensions of any length. `inputs=`/`outputs=` override
what was inferred (names, or -1 dimensions). Without examples, `inputs=` alone is enough:
examples are made up (zeros for integers, a seeded normal for floats, 8 for a -1 dimension).
A `handler` (`"module:Class"` or the class) runs around the forward in the worker
(`infless.handlers`).

The package is written to a staging directory beside `out`. It is checked the way a worker
will load it (`verify`, unless `verify=False`), given its content digest, and only then
moved to `out`. Everything wrong is a PackagingError naming the problem and the fix: a class
defined in `__main__`, tensors that do not fit, a forward that fails.

This module owns the entry and the staging, verify and move-in flow. `model_arg` sorts out
what `model` (and `weights=`) are; `examples` gives the examples and the signature.
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from infless.models.package import (
    MANIFEST_FILE,
    POSTPROCESS_NAMES,
    SOURCE_DIR,
    WEIGHTS_FILE,
    PackageManifest,
    TensorSignature,
    encode_manifest,
)
from infless.models.programs import torchscript_deprecated
from infless.packaging.digest import write_digest
from infless.packaging.examples import (
    SpecLike,
    as_numpy,
    infer_inputs,
    infer_outputs,
    name_outputs,
)
from infless.packaging.model_arg import (
    GivenModel,
    import_path,
    load_weights,
    read_weights,
    sort_out_model,
    step,
)
from infless.packaging.signature import dtype_name
from infless.packaging.source import plan_sources
from infless.packaging.verify import PackagingError, Verified, verify_package
from infless.types import TensorSpec

TORCHSCRIPT_FILE = "model.torchscript.pt"
EXPORT_FILE = "model.pt2"
# What `package` does, in order (its `on_step` hears each as it begins; the last only with
# verify=True: loading the package in a fresh process, the slow one)
PACKAGE_STEPS = (
    "building the model",
    "running the example",
    "writing the package",
    "verifying it loads and runs as a worker would",
)


@dataclass(frozen=True)
class PackageInfo:
    """A package written: where, its digest, manifest, and what packaging found."""

    path: Path
    digest: str
    manifest: PackageManifest
    source_files: list[str] = field(default_factory=list)
    unresolved_imports: list[str] = field(default_factory=list)
    verified: Verified | None = None


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
    on_step: Callable[[str], None] | None = None,
) -> PackageInfo:
    """Write a function package for `model` to `out` (see the module docstring);
    `on_step` hears each step as it begins (`PACKAGE_STEPS`, the last one with `verify`)."""
    import torch

    say = on_step or (lambda _step: None)
    say(PACKAGE_STEPS[0])
    kwargs = dict(arch_kwargs or {})
    given = sort_out_model(model, kwargs)
    if weights is not None:
        if given.format != "module":
            raise PackagingError("weights= is for a module; a program carries its own weights")
        load_weights(given.module, read_weights(weights))
    if postprocess is not None and postprocess not in POSTPROCESS_NAMES:
        raise PackagingError(
            f"postprocess {postprocess!r} is unknown; use one of {sorted(POSTPROCESS_NAMES)}"
        )
    examples, input_specs = infer_inputs(example_inputs, given.input_names, inputs, dynamic)
    say(PACKAGE_STEPS[1])
    with torch.inference_mode():
        raw = step("the forward on the example", lambda: given.module(*examples.values()))
    produced = name_outputs(raw, outputs)
    output_specs = infer_outputs(produced, outputs)
    handler_path = None if handler is None else import_path(handler, "the handler")
    roots = [given.architecture.partition(":")[0]] if given.format == "module" else []
    roots += [] if handler_path is None else [handler_path.partition(":")[0]]
    plan = plan_sources(roots)
    target = Path(out).expanduser().resolve()
    say(PACKAGE_STEPS[2])
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
            say(PACKAGE_STEPS[3])
            request = None
            if example_request is not None:
                body = example_request
                request = (body.encode() if isinstance(body, str) else body, example_content_type)
            expected = {k: as_numpy(v) for k, v in produced.items()}
            verified = verify_package(
                staging, {k: as_numpy(v) for k, v in examples.items()}, expected, request
            )
        digest = write_digest(staging)
        _swap(staging, target)
    manifest = msgspec.structs.replace(manifest, digest=digest)
    return PackageInfo(
        path=target,
        digest=digest,
        manifest=manifest,
        source_files=sorted(plan.files),
        unresolved_imports=plan.unresolved,
        verified=verified,
    )


# -- writing -------------------------------------------------------------------------------


def _signature(specs: Sequence[TensorSpec]) -> list[TensorSignature]:
    return [TensorSignature(s.name, dtype_name(s.dtype), list(s.shape)) for s in specs]


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


def _write(
    directory: Path,
    given: GivenModel,
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

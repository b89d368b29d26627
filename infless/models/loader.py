"""Worker side of function packages: resolve an architecture, build it, attach its weights.

Imports torch. `build_module` builds structure only (on `meta` it allocates nothing);
weights come from the package's safetensors file (`load_package_weights`, memory-mapped) or
from the shared tensor store, attached with `load_state_dict(state, assign=True)`.
`apply_postprocess` runs a manifest's named output step. Must not build or write packages
(that is `infless.models.build`) and must not seed weights.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import cast

import torch
from safetensors import safe_open
from torch import nn

from infless.errors import UnknownModel
from infless.models.kernels import prefer_onednn
from infless.models.package import PackageManifest, load_manifest
from infless.models.zoo import BUILDERS, ZOO

Builder = Callable[..., nn.Module]


def resolve_builder(architecture: str) -> Builder:
    """A zoo builder name (`resnet50`) or a `package.module:callable` import path."""
    target = BUILDERS.get(architecture, architecture)
    if ":" not in target:
        raise UnknownModel(
            f"architecture {architecture!r} is neither a zoo builder "
            f"({', '.join(sorted(BUILDERS))}) nor a 'package.module:callable' import path"
        )
    module_name, _, attribute = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UnknownModel(
            f"architecture {architecture!r}: cannot import {module_name!r} ({exc}); "
            "is the package installed or on PYTHONPATH?"
        ) from exc
    builder: object = module
    for part in attribute.split("."):
        builder = getattr(builder, part, None)
        if builder is None:
            raise UnknownModel(f"architecture {architecture!r}: {module_name} has no {attribute!r}")
    if not callable(builder):
        raise UnknownModel(f"architecture {architecture!r}: {attribute!r} is not callable")
    return cast(Builder, builder)


_INITIALISERS = tuple(n for n in dir(nn.init) if n.endswith("_") and not n.startswith("_"))


@contextlib.contextmanager
def skipped_init() -> Iterator[None]:
    """`torch.nn.init`'s initialisers become no-ops: on `meta` there is nothing to fill, and
    some (nn.Embedding's `normal_`) would import torch._dynamo, ~1.5 s and ~70 MiB a worker."""
    saved = {name: getattr(nn.init, name) for name in _INITIALISERS}
    try:
        for name in _INITIALISERS:
            setattr(nn.init, name, _keep)
        yield
    finally:
        for name, function in saved.items():
            setattr(nn.init, name, function)


def _keep(tensor: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
    return tensor


def build_module(manifest: PackageManifest, device: str = "cpu") -> nn.Module:
    """The manifest's module in eval mode, with builder-initialised (not package) weights.

    With `device="meta"` nothing is allocated; attach weights afterwards with
    `module.load_state_dict(state, assign=True)` (or use `load_model`).
    """
    builder = resolve_builder(manifest.architecture)
    skip = skipped_init() if device == "meta" else contextlib.nullcontext()
    try:
        with torch.device(device), skip:
            module = builder(**manifest.arch_kwargs)
    except TypeError as exc:
        raise UnknownModel(
            f"package {manifest.name!r}: architecture {manifest.architecture!r} rejected "
            f"arch_kwargs {manifest.arch_kwargs!r}: {exc}"
        ) from exc
    if not isinstance(module, nn.Module):
        raise UnknownModel(
            f"package {manifest.name!r}: architecture {manifest.architecture!r} returned "
            f"{type(module).__name__}, not a torch.nn.Module"
        )
    return module.eval()


def prime_builders() -> None:
    """Build each zoo architecture once on `meta` and attach its own tensors, then drop it.

    For the zygote, before it forks: the family modules are imported and torch's lazily
    created module and state-dict machinery exists once, shared by every child, instead of
    being created (and copied) in each worker. Allocates no tensor memory, starts no thread.
    """
    one_per_builder = {entry.builder: entry for entry in ZOO.values()}  # the machinery, once
    for entry in one_per_builder.values():
        with torch.device("meta"), skipped_init():
            module = resolve_builder(entry.builder)(**entry.kwargs)
        module.load_state_dict(module.state_dict(), assign=True)
        module.eval()


def load_package_weights(package_dir: Path, manifest: PackageManifest) -> dict[str, torch.Tensor]:
    """The package's state dict, memory-mapped from its safetensors file (CPU tensors)."""
    path = package_dir / manifest.weights_file
    if not path.is_file():
        raise UnknownModel(f"package {manifest.name!r}: weights file {path} is missing")
    state: dict[str, torch.Tensor] = {}
    with safe_open(str(path), framework="pt", device="cpu") as weights:
        for key in weights.keys():  # noqa: SIM118 - safe_open is not a mapping
            state[key] = weights.get_tensor(key)
    return state


def attach_weights(module: nn.Module, state: Mapping[str, torch.Tensor], name: str) -> nn.Module:
    """Attach `state` to a (meta-built) module by assignment; every tensor must be covered.

    The module comes back in eval mode with the kernels a worker serves (`prefer_onednn`).
    """
    try:
        module.load_state_dict(state, strict=True, assign=True)
    except RuntimeError as exc:
        raise UnknownModel(f"package {name!r}: weights do not fit the architecture: {exc}") from exc
    leftovers = [n for n, t in (*module.named_parameters(), *module.named_buffers()) if t.is_meta]
    if leftovers:
        raise UnknownModel(
            f"package {name!r}: tensors {', '.join(leftovers[:5])} are not in the state dict "
            "(non-persistent buffers cannot be restored on a meta-built module)"
        )
    prefer_onednn(module)
    return module.eval()


def load_model(package_dir: Path) -> tuple[PackageManifest, nn.Module]:
    """Manifest and ready module: meta build, then the package's weights by assignment."""
    manifest = load_manifest(package_dir)
    module = build_module(manifest, device="meta")
    state = load_package_weights(package_dir, manifest)
    return manifest, attach_weights(module, state, manifest.name)


def _softmax(tensor: torch.Tensor) -> torch.Tensor:
    return torch.softmax(tensor, dim=-1) if tensor.is_floating_point() else tensor


def _sigmoid(tensor: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(tensor) if tensor.is_floating_point() else tensor


# name -> step applied to every floating-point output (integer outputs pass through).
POSTPROCESS_STEPS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "softmax": _softmax,
    "sigmoid": _sigmoid,
}


def apply_postprocess(name: str, outputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Apply the manifest's named postprocess step to each named output."""
    try:
        step = POSTPROCESS_STEPS[name]
    except KeyError:
        raise UnknownModel(
            f"postprocess {name!r} is unknown; known steps: {', '.join(sorted(POSTPROCESS_STEPS))}"
        ) from None
    return {key: step(value) for key, value in outputs.items()}

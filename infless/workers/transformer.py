"""In the worker: turn the model it serves into another package's (Optimus's online execution).

`transform_model` checks that both models are plain "module" packages. It maps the tensors
the plan's steps name from the store (read-only, zero-copy, as `attach` does). It runs the
plan's meta-operators (`workers.metaops.execute_plan`) on the served module. It returns the
destination's `LoadedModel` and the milliseconds each kind of meta-operator took. Worker
side (imports torch).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from infless.models.programs import add_source_path
from infless.transform.structure import ModelStructure
from infless.weights.attach import ensure_descriptor_headroom, map_tensor
from infless.workers.handling import load_handler
from infless.workers.metaops import TransformFailed, execute_plan
from infless.workers.model import LoadedModel

if TYPE_CHECKING:
    import torch

    from infless.workers import protocol as p


def transform_model(
    model: LoadedModel, request: p.TransformModel
) -> tuple[LoadedModel, dict[str, float]]:
    from torch import nn

    from infless.models.package import NO_TRANSFORM, load_manifest

    package_dir = Path(request.package_dir)
    manifest = load_manifest(package_dir)
    for name, m in (("source", model.manifest), ("destination", manifest)):
        if m.format != "module" or m.transform not in NO_TRANSFORM:
            raise TransformFailed(
                f"the {name} {m.name!r} is not a plain module package (format {m.format!r}, "
                f"transform {m.transform!r}): transform only between plain modules"
            )
    if not isinstance(model.module, nn.Module):
        raise TransformFailed(f"the served model of {model.manifest.name!r} is not a module")
    structure = ModelStructure.from_json(request.structure)
    stored = {t.name: t for t in request.store_tensors}
    ensure_descriptor_headroom(sum(len(step.tensors) for step in request.steps))

    def tensor(name: str) -> torch.Tensor:
        entry = stored.get(name)
        if entry is None:
            raise KeyError(f"the store holds no tensor {name!r} of {manifest.name!r}")
        return map_tensor(entry)

    add_source_path(package_dir)
    handler = None if manifest.handler is None else load_handler(manifest.handler, package_dir)
    module, timings = execute_plan(model.module, structure, request.steps, tensor)
    return LoadedModel(manifest, module, handler), dict(timings.ms)

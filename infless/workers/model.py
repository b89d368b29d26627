"""The model a worker serves: built from its package (any format), run on tensors and requests.

Worker side (imports torch, lazily). `build_model` puts the package's `src/` on sys.path and
loads the handler when the manifest names one. Then it builds the model by format:

- "module": on the meta device, with its weights attached (mapped from the shared store, or
  read from the package). A manifest that names a `transform` (a model variant) gets it
  applied after the weights are attached (`workers.transforms`).
- "torchscript": `torch.jit.load`; "export": `torch.export.load(...).module()`. On these
  program packages any transform but "fp32" is `TransformNotApplicable`.

`LoadedModel.run` serves a batch of tensors and `serve` a batch of requests
(`workers.handling`). Both go through `forward`, which computes on the CPU. A GPU worker's
`gpu_model.DeviceModel` overrides it, and `gpu_load` builds on the device from the same
pieces: `read_package`, `host_weights` and `models.programs.load_program`. Nothing here
touches CUDA.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from infless.clock import perf_s
from infless.models.programs import add_source_path, load_program
from infless.workers import protocol as p
from infless.workers.handling import Arrays, load_handler, serve_requests

if TYPE_CHECKING:
    import torch

    from infless.handlers import Handler
    from infless.models.package import PackageManifest
    from infless.types import TensorSpec


class LoadedModel:
    """A model ready to run: the module, its manifest, its handler, conversions both ways."""

    def __init__(
        self, manifest: PackageManifest, module: Any, handler: Handler | None = None
    ) -> None:
        self.manifest = manifest
        self.module = module  # an nn.Module, a ScriptModule or an exported program's module
        self.handler = handler
        self.input_names = [s.name for s in manifest.inputs]
        self.output_names = [s.name for s in manifest.outputs]

    def run(self, inputs: dict[str, p.TensorData]) -> dict[str, p.TensorData]:
        result: dict[str, p.TensorData] = {}
        for name, array in self.forward(self.input_arrays(inputs)).items():
            result[name] = p.TensorData(str(array.dtype), list(array.shape), array.tobytes())
        return result

    def input_arrays(self, inputs: dict[str, p.TensorData]) -> Arrays:
        """The batch's inputs as arrays torch may compute on in place (writable copies)."""
        return {
            name: np.frombuffer(bytearray(t.data), dtype=t.dtype).reshape(t.shape)
            for name, t in inputs.items()
        }

    def forward(self, arrays: Arrays) -> Arrays:
        """The batch's output arrays by name, postprocess step applied."""
        import torch

        tensors = [torch.from_numpy(np.ascontiguousarray(arrays[n])) for n in self.input_names]
        with torch.inference_mode():
            outputs = self.compute(tensors)
        return {n: outputs[n].detach().contiguous().numpy() for n in self.output_names}

    def compute(self, tensors: Sequence[torch.Tensor]) -> dict[str, torch.Tensor]:
        """The module on input tensors (in signature order): the named outputs, postprocess
        step applied, on the tensors' device."""
        outputs = self._name_outputs(self.module(*tensors))
        if self.manifest.postprocess:
            from infless.models.loader import apply_postprocess

            outputs = apply_postprocess(self.manifest.postprocess, outputs)
        return outputs

    def serve(self, requests: list[p.RawRequest]) -> list[p.Answer]:
        if self.handler is None:
            raise RuntimeError(f"package {self.manifest.name!r} has no handler for requests")
        return serve_requests(self.handler, requests, self.forward, self.manifest.input_specs)

    def _name_outputs(self, raw: Any) -> dict[str, torch.Tensor]:
        if isinstance(raw, dict):
            return {name: raw[name] for name in self.output_names}
        values = list(raw) if isinstance(raw, tuple | list) else [raw]
        if len(values) != len(self.output_names):
            raise RuntimeError(
                f"model returned {len(values)} outputs, the signature declares "
                f"{len(self.output_names)} ({', '.join(self.output_names)})"
            )
        return dict(zip(self.output_names, values, strict=True))

    def check_outputs(self, outputs: dict[str, p.TensorData], rows: int) -> None:
        """Raise unless a batch of `rows` came back as the signature says (a warm-up check:
        a model answering other shapes would answer every request wrongly)."""
        for spec in self.manifest.output_specs:
            tensor = outputs.get(spec.name)
            if tensor is None:
                raise RuntimeError(f"the model gave no output {spec.name!r}")
            problem = signature_problem(tensor.dtype, tensor.shape, spec, rows)
            if problem:
                raise RuntimeError(f"output {spec.name!r} {problem}")

    def example_inputs(self, batch_size: int) -> dict[str, p.TensorData]:
        """Zero-valued inputs of the signature's shape (variable dims as 8)."""
        result = {}
        for spec in self.manifest.inputs:
            shape = [batch_size, *(8 if d < 0 else d for d in spec.shape)]
            array = np.zeros(shape, dtype=spec.dtype)
            result[spec.name] = p.TensorData(spec.dtype, shape, array.tobytes())
        return result


def signature_problem(dtype: str, shape: Sequence[int], spec: TensorSpec, rows: int) -> str | None:
    """What is wrong with an output of a batch of `rows` against its spec, or None."""
    fits = (
        len(shape) == len(spec.shape) + 1
        and shape[0] == rows
        and all(e < 0 or a == e for a, e in zip(shape[1:], spec.shape, strict=True))
    )
    if dtype != spec.dtype or not fits:
        wanted = ", ".join(map(str, [rows, *spec.shape]))
        return (
            f"is {dtype}{list(shape)} for a batch of {rows}, the signature says "
            f"{spec.dtype}[{wanted}] (-1: any length)"
        )
    return None


def build_model(request: p.LoadModel) -> tuple[LoadedModel, float]:
    """The package's model and handler; and when attaching the weights started."""
    from infless.models.loader import attach_weights, build_module
    from infless.models.package import NO_TRANSFORM

    package_dir, manifest, handler = read_package(request)
    if manifest.format != "module":
        attach_started = perf_s()
        return LoadedModel(manifest, load_program(package_dir, manifest), handler), attach_started
    module = build_module(manifest, device="meta")
    attach_started = perf_s()
    module = attach_weights(module, host_weights(request, package_dir, manifest), manifest.name)
    if manifest.transform not in NO_TRANSFORM:
        from infless.workers.transforms import apply_transform

        module = apply_transform(module, manifest.transform, manifest)
    return LoadedModel(manifest, module, handler), attach_started


def read_package(request: p.LoadModel) -> tuple[Path, PackageManifest, Handler | None]:
    """The package's directory, manifest and handler (its `src/` importable); a program
    package whose manifest names a transform is `TransformNotApplicable`."""
    from infless.models.package import NO_TRANSFORM, load_manifest

    package_dir = Path(request.package_dir)
    manifest = load_manifest(package_dir)
    add_source_path(package_dir)
    handler = None if manifest.handler is None else load_handler(manifest.handler, package_dir)
    if manifest.format != "module" and manifest.transform not in NO_TRANSFORM:
        from infless.workers.transforms import TransformNotApplicable

        raise TransformNotApplicable(
            f"package {manifest.name!r}: transform {manifest.transform!r} applies to "
            f"'module' packages, not to a {manifest.format!r} program"
        )
    return package_dir, manifest, handler


def host_weights(
    request: p.LoadModel, package_dir: Path, manifest: PackageManifest
) -> dict[str, torch.Tensor]:
    """The state dict in host memory: mapped from the store, or read from the package."""
    from infless.models.loader import load_package_weights

    if request.store_tensors is not None:
        from infless.weights.attach import attach

        return attach(request.store_tensors)
    state = load_package_weights(package_dir, manifest)
    if request.private_weights:  # drop the file mapping: anonymous memory per worker
        state = {name: tensor.clone() for name, tensor in state.items()}
    return state

"""The model a worker serves: built from its package (any format), run on tensors, and — for a
package with a handler — on requests.

Worker side (imports torch, lazily). `build_model` puts the package's `src/` on sys.path,
then builds: a "module" package on the meta device with its weights attached (mapped from
the shared store, or read from the package), a "torchscript" package with `torch.jit.load`,
an "export" package with `torch.export.load(...).module()`; and loads the handler when the
manifest names one. A "module" package whose manifest names a `transform` (a model variant)
gets it applied after its weights are attached (`workers.transforms`); on a program package
any transform but "fp32" is `TransformNotApplicable`. `LoadedModel.run` serves a batch of
tensors, `serve` a batch of requests (`workers.handling`).
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from infless.clock import perf_s
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
        arrays = {
            name: np.frombuffer(bytearray(t.data), dtype=t.dtype).reshape(t.shape)
            for name, t in inputs.items()
        }
        result: dict[str, p.TensorData] = {}
        for name, array in self.forward(arrays).items():
            result[name] = p.TensorData(str(array.dtype), list(array.shape), array.tobytes())
        return result

    def forward(self, arrays: Arrays) -> Arrays:
        """The batch's output arrays by name, postprocess step applied."""
        import torch

        tensors = [torch.from_numpy(np.ascontiguousarray(arrays[n])) for n in self.input_names]
        with torch.inference_mode():
            raw = self.module(*tensors)
        outputs = self._name_outputs(raw)
        if self.manifest.postprocess:
            from infless.models.loader import apply_postprocess

            outputs = apply_postprocess(self.manifest.postprocess, outputs)
        return {n: outputs[n].detach().contiguous().numpy() for n in self.output_names}

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


def add_source_path(package_dir: Path) -> None:
    """The package's own source (`src/`) is importable, ahead of anything installed."""
    from infless.models.package import SOURCE_DIR

    source = package_dir / SOURCE_DIR
    if source.is_dir() and str(source) not in sys.path:
        sys.path.insert(0, str(source))


def build_model(request: p.LoadModel) -> tuple[LoadedModel, float]:
    """The package's model and handler; and when attaching the weights started."""
    from infless.models.loader import attach_weights, build_module, load_package_weights
    from infless.models.package import NO_TRANSFORM, load_manifest

    package_dir = Path(request.package_dir)
    manifest = load_manifest(package_dir)
    add_source_path(package_dir)
    handler = None if manifest.handler is None else load_handler(manifest.handler, package_dir)
    transformed = manifest.transform not in NO_TRANSFORM
    if manifest.format != "module":
        if transformed:
            from infless.workers.transforms import TransformNotApplicable

            raise TransformNotApplicable(
                f"package {manifest.name!r}: transform {manifest.transform!r} applies to "
                f"'module' packages, not to a {manifest.format!r} program"
            )
        attach_started = perf_s()
        return LoadedModel(manifest, load_program(package_dir, manifest), handler), attach_started
    module = build_module(manifest, device="meta")
    attach_started = perf_s()
    if request.store_tensors is not None:
        from infless.weights.attach import attach

        state = attach(request.store_tensors)
    else:
        state = load_package_weights(package_dir, manifest)
        if request.private_weights:  # drop the file mapping: anonymous memory per worker
            state = {name: tensor.clone() for name, tensor in state.items()}
    module = attach_weights(module, state, manifest.name)
    if transformed:
        from infless.workers.transforms import apply_transform

        module = apply_transform(module, manifest.transform, manifest)
    return LoadedModel(manifest, module, handler), attach_started


def load_program(package_dir: Path, manifest: PackageManifest) -> Any:
    """A TorchScript file or a `torch.export` program, ready to call, in eval mode."""
    import torch

    path = str(package_dir / manifest.program_file)
    if manifest.format == "torchscript":
        with torchscript_deprecated():
            script = torch.jit.load(path, map_location="cpu")  # type: ignore[no-untyped-call]
        return script.eval()
    return torch.export.load(path).module()


@contextlib.contextmanager
def torchscript_deprecated() -> Iterator[None]:
    """TorchScript is deprecated since torch 2.13 (in favour of torch.export) but still
    served: its load/save warnings are not the caller's business."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", r".*torch\.jit\..* is deprecated", DeprecationWarning)
        yield

"""The variant generator's validation set: what it is, its checks, and reading it in batches.

A validation set is a file or `--generate N` seeded random samples of the signature. Files:
`.npz` / `.safetensors` with one array per input name (first axis: the samples) and
optionally `labels` (class ids); `.txt`, one request body per line, for a package with a
handler (each line through the handler's `preprocess`, batches collated as the worker does).
Generated samples give a variable dimension `GENERATED_DYNAMIC_LEN` and draw token ids below
the `int_high` they are given. The generator checks and describes the set (and reads its
labels, torch-free); each profiling child reads it in batches.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from infless.models.package import PackageManifest

if TYPE_CHECKING:
    from infless.workers.model import LoadedModel

DEFAULT_SEED = 0
GENERATED_DYNAMIC_LEN = 8  # a variable dimension's length in generated samples
LABELS = "labels"
Array = npt.NDArray[Any]


@dataclass(frozen=True, slots=True)
class Validation:
    """The validation set every child runs: a file, or `generate` seeded random samples."""

    path: Path | None = None
    generate: int | None = None
    seed: int = DEFAULT_SEED

    def args(self) -> list[str]:
        if self.path is not None:
            return ["--validation", str(self.path)]
        return ["--generate", str(self.generate), "--seed", str(self.seed)]

    def labels(self) -> Array | None:
        """The class ids the file gives, if any (read here, torch-free)."""
        if self.path is None or self.path.suffix == ".txt":
            return None
        arrays = _read_arrays(self.path)
        return arrays.get(LABELS)


def _read_arrays(path: Path) -> dict[str, Array]:
    if path.suffix == ".npz":
        with np.load(path, allow_pickle=False) as found:
            return {name: found[name] for name in found.files}
    if path.suffix == ".safetensors":
        from safetensors.numpy import load_file

        loaded: dict[str, Array] = load_file(str(path))
        return loaded
    raise ValueError(f"validation set {path}: expected a .npz, .safetensors or .txt file")


def checked_validation(
    path: Path | None, samples: int | None, seed: int, manifest: PackageManifest
) -> Validation:
    if (path is None) == (samples is None):
        raise ValueError("give exactly one of a validation file and a number of samples")
    if samples is not None and samples < 1:
        raise ValueError("--generate needs at least one sample")
    if path is not None:
        path = path.resolve()
        if not path.is_file():
            raise ValueError(f"validation set {path}: no such file")
        if path.suffix not in {".npz", ".safetensors", ".txt"}:
            raise ValueError(f"validation set {path}: expected .npz, .safetensors or .txt")
        if path.suffix == ".txt" and manifest.handler is None:
            raise ValueError(f"validation set {path}: request bodies need a package with a handler")
    return Validation(path, samples, seed)


def validation_batches(
    model: LoadedModel, validation: Validation, max_batch: int, int_high: int
) -> Iterator[dict[str, Array]]:
    specs = model.manifest.input_specs
    if validation.generate is not None:
        rng = np.random.default_rng(validation.seed)
        arrays = {}
        for spec in specs:
            shape = (
                validation.generate,
                *(GENERATED_DYNAMIC_LEN if d < 0 else d for d in spec.shape),
            )
            dtype = np.dtype(spec.dtype)
            if dtype.kind == "f":
                arrays[spec.name] = rng.standard_normal(shape).astype(dtype)
            elif dtype.kind == "b":
                arrays[spec.name] = rng.integers(0, 2, shape).astype(dtype)
            else:
                arrays[spec.name] = rng.integers(0, int_high, shape).astype(dtype)
        yield from _slices(arrays, validation.generate, max_batch)
        return
    assert validation.path is not None
    if validation.path.suffix == ".txt":
        yield from _request_batches(model, validation.path, max_batch)
        return
    found = _read_arrays(validation.path)
    missing = [s.name for s in specs if s.name not in found]
    if missing:
        raise ValueError(f"validation set {validation.path}: no array for {', '.join(missing)}")
    arrays = {s.name: np.asarray(found[s.name], dtype=s.dtype) for s in specs}
    counts = {len(a) for a in arrays.values()}
    if len(counts) != 1:
        raise ValueError(f"validation set {validation.path}: inputs differ in sample count")
    yield from _slices(arrays, counts.pop(), max_batch)


def _slices(arrays: dict[str, Array], count: int, max_batch: int) -> Iterator[dict[str, Array]]:
    for start in range(0, count, max_batch):
        yield {name: a[start : start + max_batch] for name, a in arrays.items()}


def _request_batches(model: LoadedModel, path: Path, max_batch: int) -> Iterator[dict[str, Array]]:
    """Each line a request body, through the handler's preprocess; batches collated."""
    from infless.handlers import Request
    from infless.workers.handling import collate

    assert model.handler is not None
    specs = model.manifest.input_specs
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    for start in range(0, len(lines), max_batch):
        samples = []
        for number, line in enumerate(lines[start : start + max_batch], start + 1):
            try:
                samples.append(dict(model.handler.preprocess(Request(line.encode(), "text/plain"))))
            except Exception as exc:
                raise ValueError(f"{path}:{number}: preprocess refused it: {exc}") from exc
        yield collate(samples, specs)

"""Generate a registered model's variants and profile each: `python -m infless.modelless.generate`.

    python -m infless.modelless.generate --package state/models/textcnn-69 --model textcnn-69 \\
        --out state/variants/textcnn-69 --generate 256 [--variants fp32,bf16,int8] \\
        [--validation FILE] [--metric cosine] [--max-batch 32] [--cpus 1,2] [--state-dir state]

For every variant (`profiles.TRANSFORMS`; fp32 is always made, first: it is the reference)
it writes a function package `OUT/<variant>/`: the source package's files hard-linked (copied
across file systems; `src/` copied), its manifest naming the transform and the function
`variant_function(model, variant)`. Then it profiles the variant in a fresh process of its
own (`--profile-one`), so that what it costs to load is honest: the child builds the model
as a worker does (`workers.model.build_model`, weights from the package), runs a first batch,
and that wall time is the variant's `load_ms`; its `peak_memory_bytes` is the child's peak
RSS at the end (torch, the model, the largest timed batch: all of it; read as the process's
own high-water mark `VmHWM`, since `ru_maxrss` after a fork+exec also counts the parent's
peak on Linux). The child then runs the validation set through the model (its first output
kept for the accuracy) and times the tensor forward at each batch size (powers of two up to
`--max-batch`) and core count (`torch.set_num_threads`): the median of the repetitions
`profiler.operators.measure_threads` takes within `--budget-s` (at least 3), on the calling
thread's CPU clock, inputs drawn from the signature (token ids below the smallest
`nn.Embedding`'s size, as `profiler.service.measure_model_ms`).

Validation sets: `.npz` / `.safetensors` with one array per input name (first axis: the
samples) and optionally `labels` (class ids); `.txt`, one request body per line, for a package
with a handler (each line through the handler's `preprocess`, batches collated as the worker
does); or `--generate N` seeded random samples of the signature. Accuracy (`--metric`):
`top1-labels` against given labels (the default when there are labels), else against fp32's
outputs: `top1-agreement` (argmax agreement, the default for tensor packages) or `cosine`
(mean cosine similarity of the first output per sample, the default for handler packages).

A variant whose transform does not fit the model is "not-applicable"; one whose child fails in
any way (an exception, a crash, the `--timeout-s`) is "failed" with a short message; neither
stops the others, and the package of a variant that is not ready is removed. If fp32 fails,
every variant fails with its error. With `--state-dir` holding operator profiles of the
model (`infless profile`), fp32's points get the combined-operator predictor's figure
(`predicted_ms`, without the planning offset), and every other variant fp32's prediction
scaled by its measured/fp32 ratio at the smallest <batch, cores> (one calibration point:
the others remain predictions to check against the measurements). It never profiles
operators itself.

The last stdout line is the `GenerationResult` as JSON; progress goes to stderr. `generate()`
is the same as a function. Worker side: the children import torch; this process only when
it reads operator profiles.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np
import numpy.typing as npt

from infless.clock import perf_s
from infless.errors import InflessError
from infless.modelless.profiles import (
    TRANSFORMS,
    GenerationResult,
    LatencyPoint,
    VariantProfile,
    VariantStatus,
    variant_function,
)
from infless.models.package import (
    MANIFEST_FILE,
    NO_TRANSFORM,
    SOURCE_DIR,
    PackageManifest,
    encode_manifest,
    load_manifest,
)

if TYPE_CHECKING:
    from infless.workers.model import LoadedModel

METRICS = ("top1-labels", "top1-agreement", "cosine")
DEFAULT_TIMEOUT_S = 600.0
DEFAULT_BUDGET_S = 0.3
DEFAULT_SEED = 0
GENERATED_DYNAMIC_LEN = 8  # a variable dimension's length in generated samples
TIMING_INPUT_SETS = 3  # timed calls rotate over this many input batches
LABELS = "labels"
Array = npt.NDArray[Any]
Log = Callable[[str], None]


class ChildReport(msgspec.Struct, frozen=True):
    """What a `--profile-one` child prints as its last stdout line."""

    status: VariantStatus
    error: str = ""
    load_ms: float | None = None
    peak_memory_bytes: int | None = None
    latency: list[LatencyPoint] = []
    samples: int = 0


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


def default_cpus() -> list[int]:
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return sorted({1, min(2, cores)})


def batch_sizes(max_batch: int) -> list[int]:
    sizes, size = [], 1
    while size <= max_batch:
        sizes.append(size)
        size *= 2
    return sizes


# ---------------------------------------------------------------------------------------------
# The generator (parent)


def generate(
    package_dir: Path,
    model: str,
    out_dir: Path,
    *,
    validation: Path | None = None,
    generate_samples: int | None = None,
    seed: int = DEFAULT_SEED,
    metric: str | None = None,
    variants: Sequence[str] = TRANSFORMS,
    max_batch: int = 32,
    cpus: Sequence[int] | None = None,
    state_dir: Path | None = None,
    budget_s: float = DEFAULT_BUDGET_S,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    log: Log | None = None,
) -> GenerationResult:
    """Write and profile `model`'s variants of the fp32 package `package_dir` into
    `out_dir/<variant>/` (see the module docstring); each child runs with `timeout_s`."""
    say = log or _stderr
    package_dir = package_dir.resolve()
    manifest = load_manifest(package_dir)
    if manifest.transform not in NO_TRANSFORM:
        raise ValueError(
            f"{package_dir}: the source package must be the fp32 model, not a "
            f"{manifest.transform!r} variant"
        )
    names = _variant_names(variants)
    if out_dir.resolve().is_relative_to(package_dir):
        raise ValueError(f"--out {out_dir}: variants go outside the source package")
    source = _validation(validation, generate_samples, seed, manifest)
    if max_batch < 1:
        raise ValueError("--max-batch must be at least 1")
    cores = sorted(set(cpus or default_cpus()))
    if cores[0] < 1:
        raise ValueError(f"--cpus {cores}: core counts start at 1")
    labels = source.labels()
    run = _Run(
        package_dir, manifest, out_dir.resolve(), model, source, labels,
        _metric(metric, labels, manifest), cores, max_batch, budget_s, timeout_s,
    )  # fmt: skip
    run.out_dir.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(run.scratch, ignore_errors=True)
    run.scratch.mkdir()
    started = perf_s()
    profiles: list[VariantProfile] = []
    reference: Array | None = None
    try:
        for name in names:
            fp32 = profiles[0] if profiles else None
            if fp32 is not None and fp32.status != "ready":
                _remove(run.out_dir / name)
                profile = msgspec.structs.replace(
                    run.base(name), error=f"fp32 failed: {fp32.error or fp32.status}"
                )
            else:
                say(f"{name}: writing {run.out_dir / name} and profiling it")
                profile, reference = run.profile(name, reference)
            say(_summary(profile))
            profiles.append(profile)
    finally:
        shutil.rmtree(run.scratch, ignore_errors=True)
    if state_dir is not None and profiles[0].status == "ready":
        profiles = with_predictions(profiles, package_dir, manifest, state_dir, say)
    say(f"{model}: {len(profiles)} variants in {perf_s() - started:.1f} s")
    return GenerationResult(model=model, metric=run.metric, variants=profiles)


def _validation(
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


@dataclass(frozen=True, slots=True)
class _Run:
    """One generation's settings: what every variant is written and profiled with."""

    package_dir: Path
    manifest: PackageManifest
    out_dir: Path
    model: str
    validation: Validation
    labels: Array | None
    metric: str
    cpus: list[int]
    max_batch: int
    budget_s: float
    timeout_s: float

    @property
    def scratch(self) -> Path:  # the children's first outputs, removed at the end
        return self.out_dir / ".outputs"

    def base(self, name: str) -> VariantProfile:
        return VariantProfile(
            model=self.model, name=name, transform=name, status="failed", metric=self.metric
        )

    def profile(self, name: str, reference: Array | None) -> tuple[VariantProfile, Array | None]:
        """Write the variant's package and profile it in a child; the first ready variant's
        outputs (fp32's) become the reference."""
        target = self.out_dir / name
        write_variant(self.package_dir, self.manifest, target, self.model, name)
        outputs_file = self.scratch / f"{name}.npy"
        report = run_child(
            [
                "--package", str(target), "--outputs", str(outputs_file),
                "--max-batch", str(self.max_batch), "--cpus", ",".join(map(str, self.cpus)),
                "--budget-s", str(self.budget_s), *self.validation.args(),
            ],
            self.timeout_s,
        )  # fmt: skip
        profile = msgspec.structs.replace(
            self.base(name),
            status=report.status,
            error=report.error,
            load_ms=report.load_ms,
            peak_memory_bytes=report.peak_memory_bytes,
            latency=report.latency,
        )
        if report.status == "ready":
            found: Array = np.load(outputs_file, allow_pickle=False)
            reference = found if reference is None else reference
            try:
                accuracy = score(self.metric, found, reference, self.labels)
            except ValueError as exc:
                profile = msgspec.structs.replace(profile, status="failed", error=str(exc))
            else:
                profile = msgspec.structs.replace(
                    profile, accuracy=accuracy, package_dir=str(target)
                )
        if profile.status != "ready":
            _remove(target)  # only servable variants stay in OUT
        return profile, reference


def _variant_names(variants: Sequence[str]) -> list[str]:
    unknown = [v for v in variants if v not in TRANSFORMS]
    if unknown:
        raise ValueError(f"unknown variant(s) {', '.join(unknown)}; known: {', '.join(TRANSFORMS)}")
    return ["fp32", *dict.fromkeys(v for v in variants if v != "fp32")]


def _metric(metric: str | None, labels: Array | None, manifest: PackageManifest) -> str:
    if metric is None:
        if labels is not None:
            return "top1-labels"
        return "cosine" if manifest.handler is not None else "top1-agreement"
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; known: {', '.join(METRICS)}")
    if metric == "top1-labels" and labels is None:
        raise ValueError(f"metric top1-labels needs a validation file with {LABELS!r}")
    return metric


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _remove(target: Path) -> None:
    if target.is_dir() and not target.is_symlink():
        shutil.rmtree(target)
    elif target.exists() or target.is_symlink():
        target.unlink()


def _summary(profile: VariantProfile) -> str:
    if profile.status != "ready":
        return f"{profile.name}: {profile.status}: {profile.error}"
    first = profile.latency[0] if profile.latency else None
    at = f"b{first.batch_size}/c{first.cpus} {first.measured_ms:.3f} ms" if first else "-"
    peak = (profile.peak_memory_bytes or 0) / 2**20
    return (
        f"{profile.name}: ready, {profile.metric} {profile.accuracy:.4f}, {at}, "
        f"load {profile.load_ms or 0:.0f} ms, peak {peak:.0f} MiB"
    )


def write_variant(
    package_dir: Path, manifest: PackageManifest, target: Path, model: str, variant: str
) -> Path:
    """`target` as `package_dir` with the variant's manifest: files hard-linked (copied where
    a link cannot be made), `src/` copied; a stale `target` is removed first."""
    if target == package_dir or target in package_dir.parents:
        raise ValueError(f"{target}: writing a variant there would remove the source package")
    _remove(target)
    target.mkdir(parents=True)
    for entry in sorted(package_dir.iterdir()):
        if entry.name in {MANIFEST_FILE, "__pycache__"}:
            continue
        if entry.is_dir():
            ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
            shutil.copytree(entry, target / entry.name, ignore=ignore)
        elif entry.name != SOURCE_DIR:
            _link_or_copy(entry, target / entry.name)
    variant_manifest = msgspec.structs.replace(
        manifest, name=variant_function(model, variant), transform=variant, digest=""
    )
    (target / MANIFEST_FILE).write_bytes(encode_manifest(variant_manifest))
    if manifest.digest:  # the source carried its content digest: so does the variant
        from infless.packaging.digest import write_digest

        write_digest(target)
    return target


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:  # another file system, or links not allowed here
        shutil.copy2(source, target)


def run_child(args: Sequence[str], timeout_s: float) -> ChildReport:
    """Profile one variant in a fresh interpreter; whatever goes wrong there is a "failed"
    report, never an exception here."""
    command = [sys.executable, "-m", "infless.modelless.generate", "--profile-one", *args]
    try:
        done = subprocess.run(
            command,
            check=False,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=_child_env(),
        )
    except subprocess.TimeoutExpired:
        return ChildReport("failed", f"timed out after {timeout_s:g} s (killed)")
    lines = done.stdout.strip().splitlines()
    if lines:
        try:
            return msgspec.json.decode(lines[-1], type=ChildReport)
        except msgspec.DecodeError:
            pass
    why = _last_line(done.stderr) or "no report"
    return ChildReport("failed", f"the profiling process exited {done.returncode}: {why}")


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:500] if lines else ""


def _child_env() -> dict[str, str]:
    """This environment, with this infless importable (ahead of anything on PYTHONPATH)."""
    import infless

    env = dict(os.environ)
    root = str(Path(infless.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env


def score(metric: str, found: Array, reference: Array, labels: Array | None) -> float:
    """The variant's accuracy on the validation set (see the module docstring)."""
    if metric == "top1-labels":
        if labels is None:
            raise ValueError("top1-labels needs labels")
        wanted = np.asarray(labels).reshape(-1).astype(np.int64)
        if len(wanted) != len(found):
            raise ValueError(f"{len(wanted)} labels for {len(found)} validation samples")
        return float(np.mean(_top1(found) == wanted))
    if found.shape != reference.shape:
        raise ValueError(
            f"the first output has shape {list(found.shape)}, fp32's {list(reference.shape)}"
        )
    if metric == "top1-agreement":
        return float(np.mean(_top1(found) == _top1(reference)))
    rows_a = found.reshape(len(found), -1).astype(np.float64)
    rows_b = reference.reshape(len(reference), -1).astype(np.float64)
    norms = np.linalg.norm(rows_a, axis=1) * np.linalg.norm(rows_b, axis=1)
    dots = np.sum(rows_a * rows_b, axis=1)
    both_zero = (np.linalg.norm(rows_a, axis=1) == 0) & (np.linalg.norm(rows_b, axis=1) == 0)
    # a row of zeros is like another row of zeros only
    cosine = np.where(norms > 0, dots / np.where(norms > 0, norms, 1.0), both_zero.astype(float))
    return float(min(1.0, np.mean(cosine)))


def _top1(outputs: Array) -> Array:
    """Per sample: the argmax of its scores, or its value where the output is a class id."""
    if outputs.ndim == 1:
        return outputs.astype(np.int64)
    top: Array = np.argmax(outputs.reshape(len(outputs), -1), axis=1)
    return top


def with_predictions(
    profiles: list[VariantProfile],
    package_dir: Path,
    manifest: PackageManifest,
    state_dir: Path,
    log: Log,
) -> list[VariantProfile]:
    """`predicted_ms` filled from the operator profiles in `state_dir` where it has them
    (module docstring); any trouble leaves them None."""
    try:
        predicted = fp32_predictions(package_dir, manifest, state_dir, profiles[0].latency)
    except Exception as exc:  # a stale or foreign profile database must not stop generation
        log(f"no latency predictions: {type(exc).__name__}: {exc}")
        return profiles
    if not predicted:
        return profiles
    fp32 = profiles[0]
    first = fp32.latency[0]
    result = []
    for profile in profiles:
        if profile.status != "ready" or not profile.latency:
            result.append(profile)
            continue
        own = profile.latency_ms(first.batch_size, first.cpus)
        ratio = (own / first.measured_ms) if own and first.measured_ms > 0 else None
        points = []
        for point in profile.latency:
            base = predicted.get((point.batch_size, point.cpus))
            value = None if base is None or ratio is None else base * ratio
            points.append(msgspec.structs.replace(point, predicted_ms=value))
        result.append(msgspec.structs.replace(profile, latency=points))
    return result


def fp32_predictions(
    package_dir: Path, manifest: PackageManifest, state_dir: Path, points: Sequence[LatencyPoint]
) -> dict[tuple[int, int], float]:
    """The combined-operator predictor's raw figure (no offset) at each point it can
    predict; empty without a profile database."""
    from infless.profiler.database import ProfileDatabase
    from infless.profiler.prediction import default_db_path, predictor_from
    from infless.profiler.predictor import MissingProfile

    db_path = default_db_path(state_dir)
    if not db_path.is_file() or manifest.format != "module":
        return {}
    from infless.profiler.service import ModelSource, graph_for
    from infless.workers.model import add_source_path

    add_source_path(package_dir)
    graph = graph_for(ModelSource(manifest.name, manifest, package_dir), state_dir)
    with ProfileDatabase(db_path) as db:
        predictor = predictor_from(db, [graph])
    found: dict[tuple[int, int], float] = {}
    for point in points:
        try:
            found[(point.batch_size, point.cpus)] = predictor.predict_raw_ms(
                graph.model_key, point.batch_size, point.cpus
            )
        except MissingProfile:
            continue
    return found


# ---------------------------------------------------------------------------------------------
# One variant, in its own process (worker side: imports torch)


def profile_one(
    package_dir: Path,
    outputs_file: Path,
    validation: Validation,
    max_batch: int,
    cpus: Sequence[int],
    budget_s: float,
) -> ChildReport:
    """Load the variant as a worker does, run the validation set, time it (module docstring).

    As in a worker forked from the zygote, torch and the model loader are imported before
    the load is timed; the package's files are read once first, so that every variant loads
    from a warm page cache (the first would otherwise pay the disk for all of them).
    """
    import torch

    import infless.models.loader  # noqa: F401 - imported by the zygote before any worker
    from infless.profiler.allocator import keep_freed_memory
    from infless.workers import protocol as p
    from infless.workers.model import build_model
    from infless.workers.transforms import TransformNotApplicable

    keep_freed_memory()  # as a worker: freed batches are reused, not faulted in again
    _read_through(package_dir)
    torch.set_num_threads(cpus[0])
    torch.set_flush_denormal(True)
    started = perf_s()
    try:
        model, _ = build_model(p.LoadModel(package_dir=str(package_dir), cpus=cpus[0]))
        model.check_outputs(model.run(model.example_inputs(1)), 1)  # the first forward
    except TransformNotApplicable as exc:
        return ChildReport("not-applicable", str(exc))
    load_ms = (perf_s() - started) * 1000.0
    int_high = _int_high(model)
    samples = _run_validation(model, validation, max_batch, int_high, outputs_file)
    latency = _time_forward(model, max_batch, cpus, budget_s, int_high)
    return ChildReport(
        "ready",
        load_ms=load_ms,
        peak_memory_bytes=peak_rss_bytes(),
        latency=latency,
        samples=samples,
    )


def _read_through(package_dir: Path) -> None:
    """Read every file of the package once (into the page cache)."""
    for path in sorted(package_dir.rglob("*")):
        if path.is_file():
            with path.open("rb") as handle:
                while handle.read(1 << 24):
                    pass


def peak_rss_bytes() -> int:
    """This process's peak resident set (torch included): its memory's own high-water mark
    (`VmHWM`); `ru_maxrss` where /proc is not there (after fork+exec on Linux it is at
    least the parent's peak, whatever this process used)."""
    try:
        with Path("/proc/self/status").open(encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _int_high(model: LoadedModel) -> int:
    """Token ids are drawn below the smallest `nn.Embedding`'s size (of the untransformed
    model: a frozen or quantised one may not show it), as the profiler draws them."""
    from infless.models.loader import build_module

    modules: Iterator[Any]
    if model.manifest.format == "module":
        modules = build_module(model.manifest, device="meta").modules()
    else:
        modules = model.module.modules()
    vocab = [getattr(m, "num_embeddings", 0) for m in modules]
    return min([v for v in vocab if isinstance(v, int) and v > 0], default=2)


def _validation_batches(
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


def _run_validation(
    model: LoadedModel, validation: Validation, max_batch: int, int_high: int, out: Path
) -> int:
    """Run the set in batches of `max_batch`; save the first output's rows to `out`."""
    first = model.output_names[0]
    chunks = [
        model.forward(batch)[first]
        for batch in _validation_batches(model, validation, max_batch, int_high)
    ]
    if not chunks:
        raise ValueError("the validation set is empty")
    rows = _stack_rows(chunks)
    np.save(out, rows, allow_pickle=False)
    return len(rows)


def _stack_rows(chunks: Sequence[Array]) -> Array:
    """The batches' rows as one array; trailing dimensions that vary (padded batches) are
    zero-padded to the longest, alike for every variant (their batches are the same)."""
    shapes = {c.shape[1:] for c in chunks}
    if len(shapes) == 1:
        return np.concatenate(chunks)
    target = tuple(max(c.shape[i] for c in chunks) for i in range(1, chunks[0].ndim))
    padded = []
    for chunk in chunks:
        grown = np.zeros((len(chunk), *target), dtype=chunk.dtype)
        grown[(slice(None), *(slice(0, n) for n in chunk.shape[1:]))] = chunk
        padded.append(grown)
    return np.concatenate(padded)


def _time_forward(
    model: LoadedModel, max_batch: int, cpus: Sequence[int], budget_s: float, int_high: int
) -> list[LatencyPoint]:
    """The tensor forward's median latency at each batch size and core count."""
    import itertools

    from infless.profiler.extract import example_inputs
    from infless.profiler.operators import measure_threads

    specs = model.manifest.input_specs
    module = model.module
    points: list[LatencyPoint] = []
    for batch_size in batch_sizes(max_batch):
        sets = itertools.cycle(
            [
                example_inputs(specs, batch_size, int_high=int_high, variant=v)
                for v in range(TIMING_INPUT_SETS)
            ]
        )
        found = measure_threads(
            _calls(module, sets),
            cpus,
            budget_s=budget_s,
            min_reps=3,
            max_reps=15,
        )
        points.extend(LatencyPoint(batch_size, c, measured_ms=found[c].median_ms) for c in cpus)
    return sorted(points, key=lambda p: (p.batch_size, p.cpus))


def _calls(module: Any, inputs: Iterator[list[Any]]) -> Callable[[], object]:
    """One forward per call, each on the next input set."""
    return lambda: module(*next(inputs))


# ---------------------------------------------------------------------------------------------
# Command line


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m infless.modelless.generate",
        description="Generate a registered model's variants and profile each (INFaaS).",
    )
    parser.add_argument("--package", type=Path, required=True, help="the fp32 function package")
    parser.add_argument("--model", help="the registered model's name")
    parser.add_argument("--out", type=Path, help="where the variant packages go: OUT/<variant>/")
    parser.add_argument("--validation", type=Path, help=".npz, .safetensors or .txt")
    parser.add_argument("--generate", type=int, help="N seeded random samples of the signature")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help=argparse.SUPPRESS)
    parser.add_argument("--metric", choices=METRICS)
    parser.add_argument("--variants", default=",".join(TRANSFORMS), help="comma-separated")
    parser.add_argument("--max-batch", type=int, default=32)
    parser.add_argument("--cpus", help="comma-separated core counts (default: 1 and up to 2)")
    parser.add_argument("--state-dir", type=Path, help="operator profiles for predictions")
    parser.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S, help="per point")
    parser.add_argument("--timeout-s", type=float, default=DEFAULT_TIMEOUT_S, help="per variant")
    parser.add_argument("--profile-one", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--outputs", type=Path, help=argparse.SUPPRESS)
    return parser


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if (args.validation is None) == (args.generate is None):
        parser.error("give exactly one of --validation FILE and --generate N")
    cpus = _ints(args.cpus) if args.cpus else default_cpus()
    if args.profile_one:
        return _main_child(args, cpus)
    if not args.model or args.out is None:
        parser.error("--model and --out are required")
    try:
        result = generate(
            args.package,
            args.model,
            args.out,
            validation=args.validation,
            generate_samples=args.generate,
            seed=args.seed,
            metric=args.metric,
            variants=[v.strip() for v in args.variants.split(",") if v.strip()],
            max_batch=args.max_batch,
            cpus=cpus,
            state_dir=args.state_dir,
            budget_s=args.budget_s,
            timeout_s=args.timeout_s,
        )
    except (ValueError, OSError, InflessError) as exc:
        _stderr(f"error: {exc}")
        return 2
    sys.stdout.write(msgspec.json.encode(result).decode() + "\n")
    return 0 if result.variants and result.variants[0].status == "ready" else 1


def _main_child(args: argparse.Namespace, cpus: list[int]) -> int:
    import traceback

    validation = Validation(args.validation, args.generate, args.seed)
    try:
        report = profile_one(
            args.package, args.outputs, validation, args.max_batch, cpus, args.budget_s
        )
    except Exception as exc:
        traceback.print_exc(file=sys.stderr)
        report = ChildReport("failed", _short(exc))
    sys.stdout.write(msgspec.json.encode(report).decode() + "\n")
    return 0


def _short(exc: BaseException) -> str:
    """The exception's type and the first line of its message."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:500]


if __name__ == "__main__":
    sys.exit(main())

"""Profiling one variant, in a fresh process of its own (the generator's `--profile-one`).

The child builds the model as a worker does (`workers.model.build_model`, weights from
the package) and runs a first batch. That wall time is the variant's `load_ms`. Its
`peak_memory_bytes` is the child's peak RSS at the end: torch, the model and the largest
timed batch, all of it. It is read as the process's own high-water mark `VmHWM`, because
on Linux `ru_maxrss` after a fork+exec also counts the parent's peak.

The child then runs the validation set through the model, saving its first output for the
accuracy. It times the tensor forward at each batch size (powers of two up to
`--max-batch`) and core count (`torch.set_num_threads`): the median of the repetitions
`profiler.operators.measure_threads` takes within `--budget-s` (at least 3), on the
calling thread's CPU clock. Inputs are drawn from the signature (token ids below the
smallest `nn.Embedding`'s size, as in `profiler.service.measure_model_ms`). Last, it says
whether CUDA is available to it (`cuda`); if so, the generator also measures the variant
on the GPU, in processes of their own (`gpu_points`).

Whatever happens, the child's last stdout line is its `ChildReport` as JSON. Worker side:
the functions import torch when they run, not this module.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np

from infless.clock import perf_s
from infless.modelless.profiles import LatencyPoint, VariantStatus
from infless.modelless.validation import Array, Validation, validation_batches

if TYPE_CHECKING:
    from infless.workers.model import LoadedModel

TIMING_INPUT_SETS = 3  # timed calls rotate over this many input batches


class ChildReport(msgspec.Struct, frozen=True):
    """What a `--profile-one` child prints as its last stdout line."""

    status: VariantStatus
    error: str = ""
    load_ms: float | None = None
    peak_memory_bytes: int | None = None
    latency: list[LatencyPoint] = []
    samples: int = 0
    cuda: bool = False  # a GPU is visible to this process (the variant is measured there too)


def batch_sizes(max_batch: int) -> list[int]:
    sizes, size = [], 1
    while size <= max_batch:
        sizes.append(size)
        size *= 2
    return sizes


def child_main(args: argparse.Namespace, cpus: list[int]) -> int:
    """The `--profile-one` command: profile the package, print the report last."""
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
        cuda=torch.cuda.is_available(),  # after the CPU timings: they run as on a CPU host
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


def _run_validation(
    model: LoadedModel, validation: Validation, max_batch: int, int_high: int, out: Path
) -> int:
    """Run the set in batches of `max_batch`; save the first output's rows to `out`."""
    first = model.output_names[0]
    chunks = [
        model.forward(batch)[first]
        for batch in validation_batches(model, validation, max_batch, int_high)
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

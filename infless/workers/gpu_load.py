"""Loading a function's model onto a GPU worker's device, and its warm-up with CUDA graphs.

Worker side (imports torch). `build_on_device(request, runtime)` builds a package's model as
the CPU path does (`workers.model`), then on the device:

- A "module" package is built on `meta`. Its weights are the GPU tier's device copy when the
  request carries one (`gpu_weights`, opened by `weights.gpu_open` and attached with
  `assign=True`: nothing is copied). Otherwise the host weights (store or package) are copied
  to the device, a private copy. A variant's transform is applied on the device, with its
  examples there too (a trace or a compile of device tensors). `int8` has CPU kernels only,
  so it is `TransformNotApplicable`.
- A program package is loaded onto the device (TorchScript's `map_location`, `torch.export`'s
  device pass).

`warm_up_on_device` times each warm-up batch size eagerly. Where the input shapes are fixed
and the placement allows graphs, it captures a graph and times its replay, and it keeps the
graph where the runtime says replay wins (`choose_paths`). A capture that fails is logged to
stderr, and that size stays eager. Timings are medians of the warm-up rounds, through the
whole forward (staging in, compute, staging out), so both paths are measured alike.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from infless.clock import perf_s
from infless.models.programs import load_program
from infless.workers import protocol as p
from infless.workers.gpu_model import CapturedBatch, DeviceModel
from infless.workers.gpu_runtime import DeviceRuntime
from infless.workers.handling import Arrays
from infless.workers.model import host_weights, read_package

if TYPE_CHECKING:
    import torch

GRAPH_CHECK_RTOL = 1e-3  # a replay must answer as the eager forward did (same kernels)
GRAPH_CHECK_ATOL = 1e-4
CPU_ONLY_TRANSFORMS = frozenset({"int8"})


def build_on_device(
    request: p.LoadModel,
    runtime: DeviceRuntime,
    opened: Mapping[str, torch.Tensor] | None = None,
) -> tuple[DeviceModel, float]:
    """The package's model on the runtime's device; and when attaching the weights started
    (`opened`: the GPU tier's copy, opened already)."""
    from infless.models.loader import attach_weights, build_module
    from infless.models.package import NO_TRANSFORM

    package_dir, manifest, handler = read_package(request)
    device = runtime.device
    if manifest.format != "module":
        attach_started = perf_s()
        program = load_program(package_dir, manifest, str(device))
        return DeviceModel(manifest, program, handler, runtime, False), attach_started
    if manifest.transform in CPU_ONLY_TRANSFORMS:
        from infless.workers.transforms import TransformNotApplicable

        raise TransformNotApplicable(
            f"package {manifest.name!r}: transform {manifest.transform!r} has CPU kernels "
            "only; serve this variant on CPU cores (no GPU share)"
        )
    module = build_module(manifest, device="meta")
    attach_started = perf_s()
    if request.gpu_weights is not None:
        from infless.weights.gpu_open import open_shared_weights

        state = (
            dict(opened) if opened is not None else open_shared_weights(request.gpu_weights, device)
        )
        module = attach_weights(module, state, manifest.name)
    else:
        state = host_weights(request, package_dir, manifest)
        module = runtime.to_device(attach_weights(module, state, manifest.name))
    if manifest.transform not in NO_TRANSFORM:
        from infless.workers.transforms import apply_transform, example_inputs

        def examples(batch_size: int) -> list[torch.Tensor]:
            return [t.to(device) for t in example_inputs(manifest, batch_size)]

        module = apply_transform(module, manifest.transform, manifest, examples)
    from_tier = request.gpu_weights is not None
    return DeviceModel(manifest, module.eval(), handler, runtime, from_tier), attach_started


@dataclass(frozen=True, slots=True)
class DeviceWarmUp:
    exec_ms: dict[int, float]  # the faster path's median, per warm-up batch size
    graph_batch_sizes: list[int]


def choose_paths(
    eager_ms: Mapping[int, float],
    replay_ms: Mapping[int, float],
    keeps_graph: Callable[[float, float], bool],
) -> DeviceWarmUp:
    """Per batch size, the path that serves it (a graph only where one was captured and
    `keeps_graph(eager, replay)`), and that path's time (pure)."""
    kept = sorted(b for b, replay in replay_ms.items() if keeps_graph(eager_ms[b], replay))
    exec_ms = {b: replay_ms[b] if b in kept else eager for b, eager in eager_ms.items()}
    return DeviceWarmUp(exec_ms, kept)


Timer = Callable[[Callable[[], object], int], float]


def median_ms(run: Callable[[], object], rounds: int) -> float:
    """The median of `rounds` timed runs (each ends synchronised: its outputs are on the
    host), in milliseconds."""
    timings = []
    for _ in range(max(1, rounds)):
        started = perf_s()
        run()
        timings.append((perf_s() - started) * 1000.0)
    return float(np.median(timings))


def warm_up_on_device(
    model: DeviceModel,
    batch_sizes: Sequence[int],
    rounds: int,
    graphs: bool,
    timer: Timer = median_ms,
) -> DeviceWarmUp:
    """Time each batch size eagerly and, where graphs may serve it, replayed (module
    docstring); keep the graphs that win."""
    eager_ms: dict[int, float] = {}
    replay_ms: dict[int, float] = {}
    captured: dict[int, CapturedBatch] = {}
    for batch_size in batch_sizes:
        example = model.example_inputs(batch_size)
        model.check_outputs(model.run(example), batch_size)  # pays allocation, kernel choice
        arrays = model.input_arrays(example)
        eager_ms[batch_size] = timer(partial(model.forward_eager, arrays), rounds)
        if not graphs or not model.fixed_shapes:
            continue
        graph = _capture(model, batch_size, arrays)
        if graph is not None:
            captured[batch_size] = graph
            replay_ms[batch_size] = timer(partial(graph.run, arrays), rounds)
    chosen = choose_paths(eager_ms, replay_ms, model.runtime.keeps_graph)
    for batch_size in chosen.graph_batch_sizes:
        model.keep_graph(captured[batch_size])
    return chosen


def _capture(model: DeviceModel, batch_size: int, arrays: Arrays) -> CapturedBatch | None:
    """A graph at `batch_size` that answers as the eager forward does, or None (logged)."""
    eager = model.forward_eager(arrays)
    try:
        graph = model.capture_batch(batch_size)
        replayed = graph.run(arrays)  # the first replay uploads the graph: not timed
    except Exception:
        print(
            f"infless: CUDA graph capture failed for {model.manifest.name!r} at batch "
            f"{batch_size}; that batch size runs eagerly",
            file=sys.stderr,
        )
        traceback.print_exc(file=sys.stderr)
        return None
    for name, expected in eager.items():
        if not _close(replayed[name], expected):
            print(
                f"infless: the CUDA graph of {model.manifest.name!r} at batch {batch_size} "
                f"answers {name!r} differently from the eager forward; it runs eagerly",
                file=sys.stderr,
            )
            return None
    return graph


def _close(found: npt.NDArray[np.generic], expected: npt.NDArray[np.generic]) -> bool:
    if found.shape != expected.shape or found.dtype != expected.dtype:
        return False
    if np.issubdtype(expected.dtype, np.floating):
        return bool(np.allclose(found, expected, rtol=GRAPH_CHECK_RTOL, atol=GRAPH_CHECK_ATOL))
    return bool(np.array_equal(found, expected))

"""The variant generator's GPU step: a variant's latency on a GPU, one process per share.

`gpu_points` runs where the variant's profile child found CUDA (`ChildReport.cuda`) and
the generation was given shares (`[scaling] gpu_options_pct`, the generator's
`--gpu-shares`). It runs the GPU profiling child (`profiler.gpu_profile`) on the variant's
package once per share: under the server's MPS daemon (`--mps-pipe-dir`) at each share;
without one, at 100 % only (a process then has the whole device). It returns the points as
`LatencyPoint`s with `gpu_pct` set and cpus = 1 (the host side's core).

Variants that run on a GPU as they are get measured: fp32, bf16 (the one that gains
there) and channels-last. Three are not, and say why (`VariantProfile.gpu_error`): int8
(dynamic quantisation has CPU kernels only), torchscript (a trace frozen on the CPU keeps
its constants there) and compile (compiled for the CPU). The planner then reports their
GPU shares as unpriced with that reason. Runs children; never imports torch.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from infless.modelless.profiles import LatencyPoint
from infless.profiler.gpu_profile import (
    DEFAULT_ROUNDS,
    HOST_CPUS,
    ChildRunner,
    child_command,
    child_env,
    run_child,
    shares_to_measure,
)

GPU_TRANSFORMS = frozenset({"fp32", "bf16", "channels-last"})
NOT_ON_GPU = {
    "int8": "int8 dynamic quantisation has CPU kernels only",
    "torchscript": "a TorchScript trace frozen on the CPU keeps its constants there",
    "compile": "torch.compile built it for the CPU (inductor); not measured on the GPU",
}


@dataclass(frozen=True, slots=True)
class GpuPlan:
    """How a generation measures its variants on a GPU."""

    shares_pct: tuple[int, ...]  # of one device ([scaling] gpu_options_pct)
    uuid: str | None = None  # the device (None: the first visible)
    mps_pipe_dir: str | None = None  # the server's MPS daemon (None: 100 % only)
    rounds: int = DEFAULT_ROUNDS
    timeout_s: float = 600.0  # per share


def gpu_points(
    package_dir: Path,
    transform: str,
    batch_sizes: Sequence[int],
    plan: GpuPlan,
    log: Callable[[str], None],
    run: ChildRunner | None = None,
) -> tuple[list[LatencyPoint], str]:
    """The variant's points on the GPU at each share it can be measured at, and why it has
    none ("" when it has some). A share whose child fails is logged and left out. `run`
    runs one child (default: `profiler.gpu_profile.run_child`, a process)."""
    run = run or run_child
    if transform not in GPU_TRANSFORMS:
        return [], NOT_ON_GPU.get(transform, f"transform {transform!r} is not measured on GPUs")
    shares, note = shares_to_measure(plan.shares_pct, plan.mps_pipe_dir)
    if note:
        log(f"{transform}: {note}")
    command = child_command(package_dir, batch_sizes, plan.rounds, "fp32")  # the transform's
    points: list[LatencyPoint] = []
    failures: list[str] = []
    for share in shares:
        env = child_env(share, plan.uuid, plan.mps_pipe_dir, os.environ)
        report = run(command, env, plan.timeout_s)
        if report.status != "ready":
            failures.append(f"{share} %: {report.error}")
            log(f"{transform}: on the GPU at {share} % failed: {report.error}")
            continue
        points.extend(
            LatencyPoint(p.batch_size, HOST_CPUS, p.exec_ms, gpu_pct=share) for p in report.points
        )
        if report.stopped:
            log(f"{transform}: on the GPU at {share} % stopped at {report.stopped}")
    if points:
        return points, ""
    return [], "the GPU profiling failed: " + "; ".join(failures)

"""What is known about a registered model's variants: the records the generator writes,
the metadata store keeps and every policy reads.

A **variant** is one way of running the registered model: a `transform` applied in the
worker after the weights are attached. `fp32` applies none; the others are `bf16`,
`int8` (dynamic quantisation), `channels-last`, `torchscript` (traced and frozen) and
`compile` (`torch.compile`). Each variant is a package of its own: its manifest names the
transform, and the weights are the same files, so the tensor store shares them.

A variant's profile holds its accuracy on the registration's validation set, its latency
per <batch, cores> (measured, and the combined-operator predictor's figure where it has
one), its load time and its peak memory. Where the generator ran with a GPU, the variants
that run there (fp32, bf16, channels-last) also have points at the GPU shares it measured
(`gpu_pct` > 0, host side on one core). Those are priced over <b, g> as GPU profiles are
(`scaling.gpu_profiles.GpuCurve`); `gpu_error` says why a variant has none.
Pure data: no I/O, no torch.
"""

from __future__ import annotations

import itertools
from typing import Literal

import msgspec

from infless.scaling.gpu_profiles import GpuCurve

TRANSFORMS: tuple[str, ...] = ("fp32", "bf16", "int8", "channels-last", "torchscript", "compile")
VariantStatus = Literal["ready", "failed", "not-applicable"]
# top1-labels: argmax against given labels; top1-agreement: argmax against the fp32
# variant's; cosine: mean cosine similarity of the first output to the fp32 variant's.
Metric = Literal["top1-labels", "top1-agreement", "cosine"]


class LatencyPoint(msgspec.Struct, frozen=True):
    batch_size: int
    cpus: int
    measured_ms: float  # median of the timed forwards at this <b, c, g>
    predicted_ms: float | None = None  # the predictor's figure (None: it has none)
    gpu_pct: int = 0  # > 0: measured on that share of a GPU (cpus: the host side's cores)


class VariantProfile(msgspec.Struct, frozen=True):
    model: str  # the registered model: queries name it (`/function/{model}`)
    name: str  # the variant, e.g. "int8"; its function is `variant_function(model, name)`
    transform: str
    status: VariantStatus
    error: str = ""  # why it failed or does not apply
    package_dir: str = ""
    accuracy: float | None = None
    metric: str = ""
    latency: list[LatencyPoint] = []
    load_ms: float | None = None  # build + attach + transform + first forward, fresh process
    peak_memory_bytes: int | None = None  # the loading process's peak RSS
    gpu_error: str = ""  # why it has no GPU points ("": measured, or no GPU was there)

    @property
    def cpu_latency(self) -> list[LatencyPoint]:
        """The points measured on CPU cores (what cards and CPU instances are judged by)."""
        return [p for p in self.latency if p.gpu_pct == 0]

    def exec_ms(self, batch_size: float, cpus: int, gpu_pct: int = 0) -> float:
        """t_exec at <batch_size, cpus, gpu_pct>. On cores: the points at the nearest profiled
        core count (ties: more cores), linear between profiled batch sizes, beyond the largest
        the last slope (proportional when only one size was profiled). On a GPU share: the GPU
        points as a `GpuCurve` prices them. LookupError without such points."""
        if gpu_pct > 0:
            return self._gpu_exec_ms(batch_size, gpu_pct)
        cpu_points = self.cpu_latency
        counts = sorted({p.cpus for p in cpu_points})
        if not counts:
            raise LookupError(f"variant {self.name!r} has no latency points")
        nearest = min(counts, key=lambda c: (abs(c - cpus), -c))
        points = sorted((p.batch_size, p.measured_ms) for p in cpu_points if p.cpus == nearest)
        if batch_size <= points[0][0]:
            return points[0][1]
        for (b0, t0), (b1, t1) in itertools.pairwise(points):
            if batch_size <= b1:
                return t0 + (t1 - t0) * (batch_size - b0) / (b1 - b0)
        if len(points) == 1:
            return points[0][1] * batch_size / points[0][0]
        (b0, t0), (b1, t1) = points[-2], points[-1]
        return t1 + max(0.0, (t1 - t0) / (b1 - b0)) * (batch_size - b1)

    def _gpu_exec_ms(self, batch_size: float, gpu_pct: int) -> float:
        points = [(p.batch_size, p.gpu_pct, p.measured_ms) for p in self.latency if p.gpu_pct]
        if not points:
            why = self.gpu_error or "it was profiled where no GPU was visible"
            raise LookupError(
                f"variant {self.name!r} of {self.model} has no GPU latency points: {why}"
            )
        try:
            return GpuCurve(points).exec_ms(batch_size, gpu_pct)
        except LookupError as exc:
            raise LookupError(f"variant {self.name!r} of {self.model} on a GPU: {exc}") from None

    def latency_ms(self, batch_size: int, cpus: int) -> float | None:
        """The measured time at <batch_size, cpus> on cores (None: not measured)."""
        for point in self.cpu_latency:
            if point.batch_size == batch_size and point.cpus == cpus:
                return point.measured_ms
        return None


class Goals(msgspec.Struct, frozen=True):
    """What a query (or an application) needs: a latency bound, a minimum accuracy, and how
    much cost counts against accuracy (1: cheapest that meets the goals, INFaaS's choice;
    0: the most accurate that meets them)."""

    latency_ms: float | None = None
    min_accuracy: float = 0.0
    cost_weight: float = 1.0


class Application(msgspec.Struct, frozen=True):
    app_id: str
    model: str
    goals: Goals


# The generator's stdout: lines {"progress": {"done", "total", "step"}}, then the result
PROGRESS_KEY = "progress"


class GenerationProgress(msgspec.Struct, frozen=True, kw_only=True):
    """How far the generator is: `done` variants of `total`, and the step it is on."""

    done: int
    total: int
    step: str = ""


class ProgressLine(msgspec.Struct, frozen=True, kw_only=True):
    """One progress line of the generator's stdout (`{"progress": {...}}`)."""

    progress: GenerationProgress


class GenerationResult(msgspec.Struct, frozen=True):
    """What `python -m infless.modelless.generate` prints as its last line."""

    model: str
    metric: str
    variants: list[VariantProfile]


VARIANT_SEPARATOR = "--"


def variant_function(model: str, variant: str) -> str:
    """The function that serves `variant` of `model` (callable directly to pin it)."""
    return f"{model}{VARIANT_SEPARATOR}{variant}"

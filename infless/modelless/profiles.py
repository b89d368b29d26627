"""What is known about a registered model's variants: the records the generator writes, the
metadata store keeps and every policy reads.

A **variant** is one way of running the registered model: a `transform` applied in the
worker after the weights are attached (`fp32`: none; `bf16`; `int8`: dynamic quantisation;
`channels-last`; `torchscript`: traced and frozen; `compile`: `torch.compile`). Each is a
package of its own (its manifest names the transform; the weights are the same files, so
the tensor store shares them). Its profile: accuracy on the registration's validation set,
latency per <batch, cores> (measured, and the combined-operator predictor's figure where it
has one), load time and peak memory.
Pure data: no I/O, no torch.
"""

from __future__ import annotations

import itertools
from typing import Literal

import msgspec

TRANSFORMS: tuple[str, ...] = ("fp32", "bf16", "int8", "channels-last", "torchscript", "compile")
VariantStatus = Literal["ready", "failed", "not-applicable"]
# top1-labels: argmax against given labels; top1-agreement: argmax against the fp32
# variant's; cosine: mean cosine similarity of the first output to the fp32 variant's.
Metric = Literal["top1-labels", "top1-agreement", "cosine"]


class LatencyPoint(msgspec.Struct, frozen=True):
    batch_size: int
    cpus: int
    measured_ms: float  # median of the timed forwards at this <b, c>
    predicted_ms: float | None = None  # the predictor's figure (None: it has none)


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

    def exec_ms(self, batch_size: float, cpus: int) -> float:
        """t_exec at <batch_size, cpus>: the points at the nearest profiled core count (ties:
        more cores), linear between profiled batch sizes, beyond the largest the last slope
        (proportional when only one size was profiled). LookupError without points."""
        counts = sorted({p.cpus for p in self.latency})
        if not counts:
            raise LookupError(f"variant {self.name!r} has no latency points")
        nearest = min(counts, key=lambda c: (abs(c - cpus), -c))
        points = sorted((p.batch_size, p.measured_ms) for p in self.latency if p.cpus == nearest)
        if batch_size <= points[0][0]:
            return points[0][1]
        for (b0, t0), (b1, t1) in itertools.pairwise(points):
            if batch_size <= b1:
                return t0 + (t1 - t0) * (batch_size - b0) / (b1 - b0)
        if len(points) == 1:
            return points[0][1] * batch_size / points[0][0]
        (b0, t0), (b1, t1) = points[-2], points[-1]
        return t1 + max(0.0, (t1 - t0) / (b1 - b0)) * (batch_size - b1)

    def latency_ms(self, batch_size: int, cpus: int) -> float | None:
        for point in self.latency:
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


class GenerationResult(msgspec.Struct, frozen=True):
    """What `python -m infless.modelless.generate` prints as its last line."""

    model: str
    metric: str
    variants: list[VariantProfile]


VARIANT_SEPARATOR = "--"


def variant_function(model: str, variant: str) -> str:
    """The function that serves `variant` of `model` (callable directly to pin it)."""
    return f"{model}{VARIANT_SEPARATOR}{variant}"

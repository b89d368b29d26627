"""The reference kernel behind the machine speed index (`infless.profiler.speed`), and timing it.

The kernel is fixed and small (about 1 ms on one thread): a 3x3 convolution (64 channels,
28x28) and a 256x512 by 512x256 matrix product, the arithmetic most model time goes to, on
data that fits the L2 cache. No streaming through memory: bandwidth taken by a neighbour
on the other core slows such a kernel far more than the small, cache-resident operators
that are most of a model's operators, so it would misread contention as a slower machine.
Inputs come from a seeded generator, so every process times the same arithmetic. It runs
at the thread count of what it is paired with (see `speed.SpeedIndex`): after every
repetition of a measurement (`operators.measure_threads(reference=...)`) or alone
(`measure_speed`: timed like an operator at each thread count, with a small budget).

Imports torch. Owns the kernel; `speed.REFERENCE_KERNEL` names it and must change with it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from infless.profiler.operators import measure_threads
from infless.profiler.speed import SpeedIndex

REFERENCE_BUDGET_S = 0.05  # ~40 ms in all on this machine, ~1% repeatability


def reference_kernel() -> Callable[[], object]:
    """The reference kernel, built once: call the result to run it."""
    generator = torch.Generator().manual_seed(20260101)
    conv = nn.Conv2d(64, 64, 3, padding=1, bias=False).eval()
    with torch.no_grad():
        conv.weight.copy_(torch.randn(conv.weight.shape, generator=generator) * 0.05)
    image = torch.randn(1, 64, 28, 28, generator=generator)
    left = torch.randn(256, 512, generator=generator)
    right = torch.randn(512, 256, generator=generator)

    def run() -> object:
        return conv(image), left @ right

    return run


def measure_speed(
    threads: Sequence[int],
    *,
    kernel: Callable[[], object] | None = None,
    budget_s: float = REFERENCE_BUDGET_S,
) -> SpeedIndex:
    """The speed index now for predictions at `threads`: the kernel's time at each count."""
    found = measure_threads(
        kernel or reference_kernel(), threads, budget_s=budget_s, min_reps=5, max_reps=20
    )
    return SpeedIndex.of({count: m.fast_ms for count, m in found.items()})

"""What no operator profile holds, measured once per profile database: per-call overheads
(an nn.Module call, a shape lookup, switching between different operators) and how much of
the last-level cache a working set keeps on this host.

Imports torch. Timing is `operators`'; this module only chooses what to time.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from torch import nn

from infless.clock import perf_s, wall_s
from infless.profiler.database import ProfileDatabase
from infless.profiler.operators import measure

CALIBRATION_KEYS = (
    "module_call_us",
    "python_op_us",
    "op_switch_us",
    "llc_bytes",
    "llc_effective_bytes",
)
KEEPS_SPEED = 0.9  # a working set "stays in the cache" while it streams at this share of the
# speed of the smallest one tried (see `effective_llc_bytes`)


class _Nop(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


def _switch_chain() -> list[Callable[[], object]]:
    """Small, different operators, as a model strings them together."""
    x = torch.randn(1, 16, 8, 8)
    conv, bn = nn.Conv2d(16, 16, 3, padding=1).eval(), nn.BatchNorm2d(16).eval()
    linear, norm = nn.Linear(64, 64).eval(), nn.LayerNorm(64).eval()
    pool, relu = nn.MaxPool2d(2), nn.ReLU()
    v = torch.randn(4, 64)
    return [
        lambda: conv(x),
        lambda: bn(x),
        lambda: relu(x),
        lambda: pool(x),
        lambda: linear(v),
        lambda: norm(v),
        lambda: torch.softmax(v, -1),
        lambda: v + v,
        lambda: v.transpose(0, 1).contiguous(),
        lambda: torch.tanh(v),
    ]


def calibrate() -> dict[str, float]:
    """Per-call overheads (microseconds) that no operator profile contains, and the
    last-level cache's size: nominal (`llc_bytes`) and kept by a working set here
    (`llc_effective_bytes`, see `effective_llc_bytes`).

    module_call_us: an nn.Module call around no work (container modules in a forward).
    python_op_us: a shape lookup (the "python" nodes of a graph).
    op_switch_us: what an operator costs more inside a sequence of different operators than
    in a loop of itself (cold instruction cache and branch predictors, dispatcher lookups):
    a chain of ten different small operators, minus the sum of each one alone.
    """
    nop = _Nop()
    x = torch.zeros(4)
    module_ms = measure(lambda: nop(x), threads=1, budget_s=0.1).min_ms
    python_ms = measure(lambda: x.shape[0], threads=1, budget_s=0.1).min_ms
    chain = _switch_chain()

    def run_chain() -> None:
        for op in chain:
            op()

    alone_ms = sum(measure(op, threads=1, budget_s=0.05).min_ms for op in chain)
    chain_ms = measure(run_chain, threads=1, budget_s=0.2).min_ms
    switch_ms = max(0.0, (chain_ms - alone_ms) / len(chain))
    llc = cache_bytes(3, 32 << 20)
    return {
        "module_call_us": module_ms * 1000.0,
        "python_op_us": python_ms * 1000.0,
        "op_switch_us": switch_ms * 1000.0,
        "llc_bytes": float(llc),
        "llc_effective_bytes": float(effective_llc_bytes(llc)),
    }


def largest_kept(sizes: Sequence[int], seconds_per_byte: Sequence[float]) -> int:
    """The largest of ascending working-set `sizes` up to which every one streams at
    `KEEPS_SPEED` of the smallest's speed or better (pure)."""
    if not sizes or len(sizes) != len(seconds_per_byte):
        raise ValueError("largest_kept needs one time per size, and at least one size")
    kept = sizes[0]
    for size, cost in zip(sizes[1:], seconds_per_byte[1:], strict=True):
        if cost * KEEPS_SPEED > seconds_per_byte[0]:
            break
        kept = size
    return kept


def effective_llc_bytes(llc_bytes: int, rounds: int = 3) -> int:
    """How much of the last-level cache a working set keeps on this host, measured.

    The LLC is shared with every other process on the socket (on a cloud host, other
    tenants), so a model's weights are evicted between two forwards long before they fill
    it. A buffer of 1/8 ... 8/8 of the LLC is summed over and over, as a model streams its
    weights forward after forward (the fastest sum counts, and the fastest of `rounds`
    sweeps, so a burst of contention does not decide), and the largest that still streams
    at `KEEPS_SPEED` of the smallest's speed is the effective size (measured here: a 32 MB
    LLC, 77-80 GB/s up to 12 MB, 69 at 16 MB, 47 at 24 MB, 36-39 from 32 MB on).
    """
    sizes = [llc_bytes * k // 8 for k in range(1, 9)]
    best = [math.inf] * len(sizes)
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for _ in range(rounds):
            for i, size in enumerate(sizes):
                buffer = torch.ones(max(1, size // 4))
                for repetition in range(7):
                    started = perf_s()
                    buffer.sum()
                    if repetition >= 2:  # the first ones bring it into the caches
                        best[i] = min(best[i], (perf_s() - started) / size)
    finally:
        torch.set_num_threads(previous)
    return largest_kept(sizes, best)


def ensure_calibration(db: ProfileDatabase, *, force: bool = False) -> dict[str, float]:
    values = db.calibration()
    if force or any(k not in values for k in CALIBRATION_KEYS):
        values = calibrate()
        db.set_calibration(values, wall_s())
    return values


def cache_bytes(level: int, default: int) -> int:
    """The size of this CPU's level-`level` cache (sysfs), or `default` when unknown."""
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    try:
        for index in sorted(base.glob("index*")):
            if (index / "level").read_text().strip() == str(level):
                text = (index / "size").read_text().strip().upper()
                factor = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
                return int(text.rstrip("KMG")) * factor
    except (OSError, ValueError):
        pass
    return default

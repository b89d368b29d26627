"""Vectorised replay of per-minute invocation counts through the cold-start policies.

Owns: the arrivals indexed by function, the policies' windows at every decision point computed
in bulk with the same maths as the pure policies (`histogram.py`), and the per-function
outcome (cold starts, invocations, idle warm seconds, loads).

Pure: no I/O, no clock; randomness only from the seed it is given.

Model (the same for every policy; see the evaluation docstring for the reasoning):
* the unit is the function; one instance, executions take no time, memory is unlimited;
* arrivals: a minute with k invocations gets k uniform arrival times inside it. Only the
  first and last arrival of each active minute matter (every gap inside a minute is < 1
  bin), so they are drawn directly as order statistics of k uniforms: exact and O(minutes)
  (`loadgen.arrivals.first_and_last_in_minutes`, the shared arrival generator);
* burst grace: arrivals after the first one in the same trace minute find the instance the
  first one used (warm); all their gaps are recorded by the policy (bin 0; LSTH's
  per-minute short histogram records only the minute's first gap) and count as
  idle warm time. The policy's windows after the last arrival of an active minute decide
  the first arrival of the next active minute: warm iff pw <= gap <= pw + ka.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from infless.coldstart.config import HistogramConfig
from infless.coldstart.histogram import (
    FloatArray,
    HistogramStats,
    IntArray,
    hhp_windows,
    histogram_stats,
    lsth_blend,
)
from loadgen.arrivals import first_and_last_in_minutes

MINUTE_S = 60.0


@dataclass(frozen=True, slots=True)
class Arrivals:
    """One row per active (function, minute), function-major and time-ordered."""

    func: IntArray
    minute: IntArray
    count: IntArray
    first_s: FloatArray
    last_s: FloatArray
    offsets: IntArray  # rows of function f are offsets[f]:offsets[f + 1]
    n_functions: int
    horizon_s: float

    @property
    def first_row(self) -> NDArray[np.bool_]:
        """True on each function's first active minute (no previous arrival)."""
        flag = np.ones(self.func.shape[0], dtype=bool)
        flag[1:] = self.func[1:] != self.func[:-1]
        return flag

    @property
    def gap_s(self) -> FloatArray:
        """Idle time before each row's first arrival (NaN on first rows)."""
        gap = np.full(self.func.shape[0], np.nan)
        gap[1:] = self.first_s[1:] - self.last_s[:-1]
        gap[self.first_row] = np.nan
        return gap


def synthesize_arrivals(counts: NDArray[np.int64], seed: int) -> Arrivals:
    """Draw each active minute's first and last arrival (uniform arrivals, seeded).

    The draw is the shared arrival generator's (`loadgen.arrivals`); here it is indexed by
    function.
    """
    ends = first_and_last_in_minutes(counts, seed, MINUTE_S)
    offsets = np.searchsorted(ends.row, np.arange(counts.shape[0] + 1)).astype(np.int64)
    return Arrivals(
        func=ends.row,
        minute=ends.minute,
        count=ends.count,
        first_s=ends.first_s,
        last_s=ends.last_s,
        offsets=offsets,
        n_functions=int(counts.shape[0]),
        horizon_s=counts.shape[1] * MINUTE_S,
    )


# --------------------------------------------------------------------------- windows


def fixed_windows(arrivals: Arrivals, keepalive_s: float) -> tuple[FloatArray, FloatArray]:
    n = arrivals.func.shape[0]
    return np.zeros(n), np.full(n, keepalive_s)


def histogram_rows(
    arrivals: Arrivals, cfg: HistogramConfig, window_min: int | None, per_minute: bool = False
) -> HistogramStats:
    """Histogram statistics after the last arrival of every active minute.

    `window_min` None: all ITs so far (HHP). Otherwise only ITs observed in minutes
    (M − window_min, M], M the row's minute (LSTH's sliding windows). `per_minute`: only
    the first arrival of each minute records its IT (LSTH's short histogram); otherwise
    every arrival does, the later ones of a minute in bin 0.
    """
    gap = arrivals.gap_s
    parts: list[HistogramStats] = []
    for f in range(arrivals.n_functions):
        lo, hi = int(arrivals.offsets[f]), int(arrivals.offsets[f + 1])
        if hi > lo:
            parts.append(_function_rows(arrivals, gap, lo, hi, cfg, window_min, per_minute))
    if not parts:
        zi, zf = np.zeros(0, dtype=np.int64), np.zeros(0)
        return HistogramStats(zi, zi, zf, zi, zi, zi)
    return HistogramStats(
        *(np.concatenate([getattr(p, name) for p in parts]) for name in _STAT_FIELDS)
    )


_STAT_FIELDS = ("n_in", "oob_count", "oob_mean_s", "sum_sq", "head_bin", "tail_bin")


def _function_rows(
    arrivals: Arrivals,
    gap: FloatArray,
    lo: int,
    hi: int,
    cfg: HistogramConfig,
    window_min: int | None,
    per_minute: bool,
) -> HistogramStats:
    rows = hi - lo
    g = gap[lo:hi]
    has_gap = ~np.isnan(g)
    bins = np.where(has_gap, np.floor(np.where(has_gap, g, 0.0) / cfg.bin_s), -1).astype(np.int64)
    in_range = has_gap & (bins < cfg.range_bins)
    oob = has_gap & ~in_range
    columns = np.unique(np.concatenate(([0], bins[in_range])))
    inc = np.zeros((rows + 1, columns.shape[0]), dtype=np.int64)
    where = np.flatnonzero(in_range)
    inc[where + 1, np.searchsorted(columns, bins[where])] += 1
    if not per_minute:
        inc[1:, 0] += arrivals.count[lo:hi] - 1  # gaps inside a minute: bin 0
    cum = np.cumsum(inc, axis=0)  # row 0 is the empty prefix
    oob_cum = np.concatenate(([0], np.cumsum(oob)))
    oob_sum = np.concatenate(([0.0], np.cumsum(np.where(oob, g, 0.0))))
    end = np.arange(1, rows + 1)
    if window_min is None:
        start = np.zeros(rows, dtype=np.int64)
    else:
        minute = arrivals.minute[lo:hi]
        start = np.searchsorted(minute, minute - window_min, side="right")
    return histogram_stats(
        cum[end] - cum[start],
        columns,
        oob_count=oob_cum[end] - oob_cum[start],
        oob_sum_s=oob_sum[end] - oob_sum[start],
        head_q=cfg.head_q,
        tail_q=cfg.tail_q,
    )


def hhp_rows(arrivals: Arrivals, cfg: HistogramConfig) -> tuple[FloatArray, FloatArray]:
    pw, ka, _ = hhp_windows(histogram_rows(arrivals, cfg, None), cfg)
    return pw, ka


def lsth_rows(
    arrivals: Arrivals,
    cfg: HistogramConfig,
    *,
    gammas: Sequence[float],
    long_window_min: int,
    short_window_min: int,
    short_min_its: int,
    short_per_minute: bool = True,
) -> dict[float, tuple[FloatArray, FloatArray]]:
    """LSTH windows for several γ at once (the histograms do not depend on γ)."""
    long_stats = histogram_rows(arrivals, cfg, long_window_min)
    short_stats = histogram_rows(arrivals, cfg, short_window_min, short_per_minute)
    out: dict[float, tuple[FloatArray, FloatArray]] = {}
    for gamma in gammas:
        pw, ka, _ = lsth_blend(
            long_stats, short_stats, cfg, gamma=gamma, short_min_its=short_min_its
        )
        out[gamma] = (pw, ka)
    return out


# --------------------------------------------------------------------------- outcome


@dataclass(frozen=True, slots=True)
class FunctionOutcome:
    """Per-function totals over the counted period (after the warm-up)."""

    invocations: IntArray
    cold_starts: IntArray
    idle_warm_s: FloatArray  # loaded and not executing, incl. pre-warmed time
    loads: IntArray  # cold starts + pre-warm loads


def replay(
    arrivals: Arrivals, prewarm_s: FloatArray, keepalive_s: FloatArray, warmup_min: int = 0
) -> FunctionOutcome:
    """Apply each row's windows to the gap that follows it; count from `warmup_min` on."""
    warmup_s = warmup_min * MINUTE_S
    n_f = arrivals.n_functions
    func = arrivals.func
    first_row = arrivals.first_row
    counted = arrivals.minute >= warmup_min
    follows = ~first_row  # rows whose first arrival follows a previous row's windows

    pw_prev = np.zeros_like(prewarm_s)
    ka_prev = np.zeros_like(keepalive_s)
    t_prev = np.zeros_like(arrivals.first_s)
    pw_prev[1:], ka_prev[1:], t_prev[1:] = prewarm_s[:-1], keepalive_s[:-1], arrivals.last_s[:-1]
    gap = arrivals.first_s - t_prev
    load_at = t_prev + pw_prev
    release_at = load_at + ka_prev
    warm = follows & (gap >= pw_prev) & (gap <= pw_prev + ka_prev)
    cold = ~warm & counted

    idle = np.where(counted, arrivals.last_s - arrivals.first_s, 0.0)  # inside the minute
    cross = np.minimum(release_at, arrivals.first_s) - np.maximum(load_at, warmup_s)
    idle += np.where(follows, np.maximum(cross, 0.0), 0.0)
    prewarmed = follows & (pw_prev > 0) & (gap >= pw_prev) & (load_at >= warmup_s)

    last_row = np.ones_like(first_row)
    last_row[:-1] = first_row[1:]
    tail_load = arrivals.last_s + prewarm_s
    tail_end = np.minimum(tail_load + keepalive_s, arrivals.horizon_s)
    tail = np.maximum(tail_end - np.maximum(tail_load, warmup_s), 0.0)
    idle += np.where(last_row, tail, 0.0)
    prewarmed_tail = (
        last_row & (prewarm_s > 0) & (tail_load < arrivals.horizon_s) & (tail_load >= warmup_s)
    )

    def per_function(values: NDArray[np.generic]) -> FloatArray:
        totals = np.bincount(func, weights=values.astype(np.float64), minlength=n_f)
        return totals.astype(np.float64)

    invocations = per_function(np.where(counted, arrivals.count, 0))
    cold_starts = per_function(cold)
    loads = cold_starts + per_function(prewarmed) + per_function(prewarmed_tail)
    return FunctionOutcome(
        invocations=np.rint(invocations).astype(np.int64),
        cold_starts=np.rint(cold_starts).astype(np.int64),
        idle_warm_s=per_function(idle),
        loads=np.rint(loads).astype(np.int64),
    )

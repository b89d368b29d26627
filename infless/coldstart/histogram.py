"""Idle-time histograms and the HHP window maths (Shahrad et al., ATC'20, as in the spec §2.2).

Owns: the immutable `Histogram` value (1-minute bins over a range, out-of-bounds counting),
the summary statistics the policies need (`HistogramStats`: in-range count, out-of-bounds
count and mean, sum of squared bin counts, head and tail bins), and the vectorised decision
that turns those statistics into pre-warm and keep-alive windows (`hhp_windows`,
`histogram_branch_windows`). The same functions serve the pure policies (one row) and the
offline replay (one row per decision point), so the two cannot drift apart.

Pure: no I/O, no clock, no module state.

Conventions (in seconds unless the name says bins):
* an idle time (IT) of `it_s` falls in bin `floor(it_s / bin_s)`; bins >= `range_bins` are
  out-of-bounds (OOB);
* the head (tail) bin is the first bin whose cumulative count reaches `head_q·N` (`tail_q·N`),
  N the in-range count; head is used rounded down (bin start), tail rounded up (bin end);
* representative  <=>  N >= min_its and CV(bin counts) >= cv_threshold, with
  CV² = B·Σc²/N² − 1 over the B = range_bins bins (exact integer test, no division).
  `min_its` (default 10) is ours: the spec expects the CV test to reject near-empty
  histograms, but the CV of bin counts is *high* for them (1 IT in 240 bins: CV = 15.5), so
  without an explicit minimum one IT would set both windows. 10 is the minimum some public
  reimplementations use (spec §2.2, "too few invocations").
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import IntEnum

import numpy as np
from numpy.typing import NDArray

from infless.coldstart.config import HistogramConfig

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


class Branch(IntEnum):
    """Which rule produced a function's windows."""

    HISTOGRAM = 0  # representative histogram: head/tail percentiles with margins
    STANDARD = 1  # not representative (too few ITs or CV below threshold): standard keep-alive
    ARIMA = 2  # too many out-of-bounds ITs: time-series forecast of the next IT


def bin_of(it_s: float, bin_s: float) -> int:
    """The bin index of an idle time (negative idle times count as 0)."""
    return int(max(it_s, 0.0) // bin_s)


@dataclass(frozen=True, slots=True)
class Histogram:
    """An immutable idle-time histogram: in-range bin counts plus out-of-bounds ITs.

    OOB ITs are kept as a count and a sum (their mean feeds the ARIMA substitute).
    """

    counts: tuple[int, ...]
    oob_count: int = 0
    oob_sum_s: float = 0.0

    @staticmethod
    def empty(range_bins: int) -> Histogram:
        return Histogram(counts=(0,) * range_bins)

    @property
    def range_bins(self) -> int:
        return len(self.counts)

    @property
    def in_range(self) -> int:
        return sum(self.counts)

    def add(self, it_s: float, bin_s: float, times: int = 1) -> Histogram:
        """Record `times` idle times of `it_s` seconds (use negative `times` to forget them)."""
        b = bin_of(it_s, bin_s)
        if b >= self.range_bins:
            return Histogram(self.counts, self.oob_count + times, self.oob_sum_s + times * it_s)
        counts = list(self.counts)
        counts[b] += times
        if counts[b] < 0:
            raise ValueError(f"bin {b} would hold {counts[b]} idle times: removed more than added")
        return Histogram(tuple(counts), self.oob_count, self.oob_sum_s)

    def stats(self, head_q: float, tail_q: float) -> HistogramStats:
        row = np.asarray(self.counts, dtype=np.int64)[None, :]
        return histogram_stats(
            row,
            np.arange(self.range_bins, dtype=np.int64),
            oob_count=np.array([self.oob_count], dtype=np.int64),
            oob_sum_s=np.array([self.oob_sum_s], dtype=np.float64),
            head_q=head_q,
            tail_q=tail_q,
        )


@dataclass(frozen=True, slots=True)
class HistogramStats:
    """Per-row summary of histograms (one row per decision point)."""

    n_in: IntArray  # in-range IT count N
    oob_count: IntArray
    oob_mean_s: FloatArray  # mean OOB idle time (0 where there is none)
    sum_sq: IntArray  # Σ over bins of count²
    head_bin: IntArray  # bin of the head percentile (0 where N == 0)
    tail_bin: IntArray  # bin of the tail percentile (0 where N == 0)


def percentile_bins(cum_counts: IntArray, n_in: IntArray, q: float, bins: IntArray) -> IntArray:
    """The bin of the q-quantile for each row: the first bin whose cumulative count >= q·N.

    `cum_counts` is (rows, columns) cumulative along columns; `bins` maps column -> bin index
    (columns may skip empty bins: the first column reaching q·N > 0 is never an empty one).
    Rows with N == 0 get bin 0.
    """
    threshold = q * n_in.astype(np.float64)
    below = (cum_counts < threshold[:, None]).sum(axis=1)
    below = np.minimum(below, bins.shape[0] - 1)
    return np.where(n_in > 0, bins[below], 0).astype(np.int64)


def histogram_stats(
    counts: IntArray,
    bins: IntArray,
    *,
    oob_count: IntArray,
    oob_sum_s: FloatArray,
    head_q: float,
    tail_q: float,
) -> HistogramStats:
    """Summarise histogram rows given as (rows, columns) counts over the sorted `bins`."""
    cum = np.cumsum(counts, axis=1)
    n_in = cum[:, -1] if counts.shape[1] else np.zeros(counts.shape[0], dtype=np.int64)
    safe = np.maximum(oob_count, 1)
    return HistogramStats(
        n_in=n_in.astype(np.int64),
        oob_count=oob_count.astype(np.int64),
        oob_mean_s=np.where(oob_count > 0, oob_sum_s / safe, 0.0),
        sum_sq=(counts * counts).sum(axis=1).astype(np.int64),
        head_bin=percentile_bins(cum, n_in, head_q, bins),
        tail_bin=percentile_bins(cum, n_in, tail_q, bins),
    )


def is_representative(stats: HistogramStats, cfg: HistogramConfig) -> NDArray[np.bool_]:
    """N >= min_its and CV of the bin counts >= cv_threshold (B·Σc² >= (1 + thr²)·N²)."""
    n = stats.n_in.astype(np.float64)
    lhs = cfg.range_bins * stats.sum_sq.astype(np.float64)
    return (stats.n_in >= cfg.min_its) & (lhs >= (1.0 + cfg.cv_threshold**2) * n * n)


def oob_dominates(stats: HistogramStats, cfg: HistogramConfig) -> NDArray[np.bool_]:
    """Out-of-bounds ITs make up at least `oob_threshold` of all ITs (and there is one)."""
    total = (stats.n_in + stats.oob_count).astype(np.float64)
    return (stats.oob_count > 0) & (stats.oob_count >= cfg.oob_threshold * total)


def histogram_branch_windows(
    stats: HistogramStats, cfg: HistogramConfig
) -> tuple[FloatArray, FloatArray]:
    """Pre-warm and keep-alive (seconds) from head/tail percentiles with the margins.

    pre-warm = head·bin·(1 − margin); the image stays alive until (tail + 1)·bin·(1 + margin);
    keep-alive = alive-until − pre-warm, at least one bin.
    """
    prewarm_s = stats.head_bin * cfg.bin_s * (1.0 - cfg.margin)
    alive_until_s = (stats.tail_bin + 1) * cfg.bin_s * (1.0 + cfg.margin)
    keepalive_s = np.maximum(alive_until_s - prewarm_s, cfg.bin_s)
    return prewarm_s.astype(np.float64), keepalive_s.astype(np.float64)


def hhp_windows(
    stats: HistogramStats, cfg: HistogramConfig
) -> tuple[FloatArray, FloatArray, IntArray]:
    """The full HHP decision per row: ARIMA if OOB dominates, else histogram or standard.

    ARIMA branch: the forecast P of the next IT is the mean of the out-of-bounds ITs (a
    constant-mean ARIMA(0,0,0) model of the long-IT series; see the policies' docstring);
    alive over [P·(1 − m), P·(1 + m)]. Standard keep-alive: no pre-warm, keep the range.
    """
    hist_pw, hist_ka = histogram_branch_windows(stats, cfg)
    arima_p = stats.oob_mean_s
    arima_pw = arima_p * (1.0 - cfg.arima_margin)
    arima_ka = np.maximum(2.0 * cfg.arima_margin * arima_p, cfg.bin_s)
    arima = oob_dominates(stats, cfg)
    certain = is_representative(stats, cfg)
    branch = np.where(
        arima, int(Branch.ARIMA), np.where(certain, int(Branch.HISTOGRAM), int(Branch.STANDARD))
    )
    prewarm_s = np.where(arima, arima_pw, np.where(certain, hist_pw, 0.0))
    keepalive_s = np.where(arima, arima_ka, np.where(certain, hist_ka, cfg.range_s))
    return prewarm_s, keepalive_s, branch.astype(np.int64)


def lsth_blend(
    long_stats: HistogramStats,
    short_stats: HistogramStats,
    cfg: HistogramConfig,
    *,
    gamma: float,
    short_min_its: int,
) -> tuple[FloatArray, FloatArray, IntArray]:
    """LSTH windows: γ·long + (1 − γ)·short, per the spec §4 (our design where the paper is silent).

    The long histogram gets the full HHP decision. If it takes the ARIMA branch, its windows
    are used as they are. The short histogram only has the histogram branch; when it holds
    fewer than `short_min_its` ITs or is not representative (CV), it takes the long windows.
    Returns (prewarm_s, keepalive_s, branch of the long histogram).
    """
    long_pw, long_ka, branch = hhp_windows(long_stats, cfg)
    short_pw, short_ka = histogram_branch_windows(short_stats, cfg)
    short_ok = is_representative(short_stats, replace(cfg, min_its=max(1, short_min_its)))
    use_short = short_ok & (branch != Branch.ARIMA)
    short_pw = np.where(use_short, short_pw, long_pw)
    short_ka = np.where(use_short, short_ka, long_ka)
    prewarm_s = np.maximum(gamma * long_pw + (1.0 - gamma) * short_pw, 0.0)
    keepalive_s = np.maximum(gamma * long_ka + (1.0 - gamma) * short_ka, cfg.bin_s)
    return prewarm_s, keepalive_s, branch

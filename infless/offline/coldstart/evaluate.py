"""Offline comparison of cold-start policies on a trace (spec §5): sweeps and metrics.

Owns: `EvalConfig` (which policies, parameter sweeps, seed, warm-up), `evaluate` (runs every
policy configuration through the vectorised replay on the same synthesized arrivals and the
same memory) and the metrics (`Metrics`, `PolicyResult`).

Pure: no I/O, no clock (the CLI times and prints).

Fairness (spec §5.3), identical for every policy:
* the same trace, the same arrivals (one seeded synthesis shared by all runs), the same
  memory per function, the same model (see `replay.py`): function as the unit, one
  instance, zero execution time, unlimited memory, burst grace inside a trace minute;
* warm-up: `warmup_min` (default 0). With a one-day trace and LSTH's 24 h long window there
  is no learning day to drop, so the default counts every policy from t = 0: the first
  invocation of each function is cold under every policy. Histograms always learn from
  t = 0; with a warm-up, invocations and idle time before it are not counted;
* wasted memory-time = idle warm seconds (loaded, not executing, pre-warmed time included,
  up to the end of the trace) × memory, in GB·s (MB / 1024), normalised to fixed 10 min.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
from numpy.typing import NDArray

from infless.coldstart.config import HistogramConfig
from infless.coldstart.histogram import FloatArray
from infless.offline.coldstart.replay import (
    FunctionOutcome,
    fixed_windows,
    hhp_rows,
    lsth_rows,
    replay,
    synthesize_arrivals,
)
from infless.offline.coldstart.trace import PATTERN_CLASSES

POLICIES = ("fixed", "hhp", "lsth")
REFERENCE_KEEPALIVE_MIN = 10.0  # waste is normalised to fixed keep-alive of 10 minutes


@dataclass(frozen=True, slots=True)
class EvalConfig:
    policies: tuple[str, ...] = POLICIES
    fixed_keepalive_min: tuple[float, ...] = (5, 10, 20, 30, 45, 60, 90, 120)
    fixed_headline_min: float = 10.0
    hhp_range_h: tuple[float, ...] = (1, 2, 3, 4)
    hhp_headline_h: float = 4.0
    lsth_gammas: tuple[float, ...] = (0.0, 0.3, 0.5, 0.7, 1.0)
    lsth_headline_gamma: float = 0.3
    long_window_min: int = 1440
    short_window_min: int = 60
    short_min_its: int = 5
    short_per_minute: bool = True
    histogram: HistogramConfig = field(default_factory=HistogramConfig)
    seed: int = 0
    warmup_min: int = 0

    def __post_init__(self) -> None:
        unknown = sorted(set(self.policies) - set(POLICIES))
        if unknown or not self.policies:
            raise ValueError(
                f"policies={','.join(self.policies)!r}: choose from {','.join(POLICIES)}"
            )
        if self.warmup_min < 0:
            raise ValueError(f"warmup_min={self.warmup_min}: must be >= 0")
        bad = [g for g in (*self.lsth_gammas, self.lsth_headline_gamma) if not 0 <= g <= 1]
        if bad:
            raise ValueError(f"gamma={bad[0]}: every γ must be in [0, 1]")


@dataclass(frozen=True, slots=True)
class Metrics:
    invocations: int
    cold_starts: int
    cold_start_rate: float  # fraction of all counted invocations
    q3_function_cold_start_pct: float  # 75th percentile over functions of cold %
    median_function_cold_start_pct: float
    p90_function_cold_start_pct: float
    wasted_memory_gb_s: float
    wasted_memory_normalized_pct: float  # fixed 10 min = 100
    loads: int  # cold starts + pre-warm loads (model-load churn)


@dataclass(frozen=True, slots=True)
class CurvePoint:
    param: float
    metrics: Metrics


@dataclass(frozen=True, slots=True)
class PolicyResult:
    policy: str
    param_name: str  # "keepalive_min", "range_h" or "gamma"
    headline_param: float
    headline: Metrics
    curve: tuple[CurvePoint, ...]
    by_class: dict[str, Metrics]  # headline configuration split by pattern class


@dataclass(frozen=True, slots=True)
class EvalResult:
    results: dict[str, PolicyResult]
    reference_waste_gb_s: float
    functions: int
    invocations: int
    class_sizes: dict[str, int]


def evaluate(
    counts: NDArray[np.int64],
    memory_mb: FloatArray,
    cfg: EvalConfig,
    classes: NDArray[np.str_] | None = None,
) -> EvalResult:
    """Run every requested policy configuration on one shared set of arrivals."""
    if memory_mb.shape != (counts.shape[0],):
        raise ValueError(
            f"memory_mb has shape {memory_mb.shape}; need one value per function "
            f"({counts.shape[0]})"
        )
    arrivals = synthesize_arrivals(counts, cfg.seed)
    weight_gb = memory_mb / 1024.0
    reference = replay(
        arrivals, *fixed_windows(arrivals, REFERENCE_KEEPALIVE_MIN * 60.0), cfg.warmup_min
    )
    ref_waste_gb_s = reference.idle_warm_s * weight_gb

    def outcome(pw: FloatArray, ka: FloatArray) -> FunctionOutcome:
        return replay(arrivals, pw, ka, cfg.warmup_min)

    def metrics(o: FunctionOutcome, mask: NDArray[np.bool_] | None = None) -> Metrics:
        return _metrics(o, weight_gb, ref_waste_gb_s, mask)

    runs: dict[str, tuple[str, float, dict[float, FunctionOutcome]]] = {}
    if "fixed" in cfg.policies:
        grid = _with(cfg.fixed_keepalive_min, cfg.fixed_headline_min)
        runs["fixed"] = (
            "keepalive_min",
            cfg.fixed_headline_min,
            {t: outcome(*fixed_windows(arrivals, t * 60.0)) for t in grid},
        )
    if "hhp" in cfg.policies:
        grid = _with(cfg.hhp_range_h, cfg.hhp_headline_h)
        hhp: dict[float, FunctionOutcome] = {}
        for hours in grid:
            hcfg = replace(cfg.histogram, range_min=round(hours * 60))
            hhp[hours] = outcome(*hhp_rows(arrivals, hcfg))
        runs["hhp"] = ("range_h", cfg.hhp_headline_h, hhp)
    if "lsth" in cfg.policies:
        grid = _with(cfg.lsth_gammas, cfg.lsth_headline_gamma)
        windows = lsth_rows(
            arrivals,
            cfg.histogram,
            gammas=grid,
            long_window_min=cfg.long_window_min,
            short_window_min=cfg.short_window_min,
            short_min_its=cfg.short_min_its,
            short_per_minute=cfg.short_per_minute,
        )
        runs["lsth"] = (
            "gamma",
            cfg.lsth_headline_gamma,
            {g: outcome(*windows[g]) for g in grid},
        )

    class_labels = classes if classes is not None else np.full(counts.shape[0], "other")
    results: dict[str, PolicyResult] = {}
    for name, (param_name, headline, by_param) in runs.items():
        head = by_param[headline]
        results[name] = PolicyResult(
            policy=name,
            param_name=param_name,
            headline_param=headline,
            headline=metrics(head),
            curve=tuple(CurvePoint(p, metrics(by_param[p])) for p in sorted(by_param)),
            by_class={
                c: metrics(head, class_labels == c)
                for c in PATTERN_CLASSES
                if (class_labels == c).any()
            },
        )
    return EvalResult(
        results=results,
        reference_waste_gb_s=float(ref_waste_gb_s.sum()),
        functions=int(counts.shape[0]),
        invocations=int(reference.invocations.sum()),
        class_sizes={c: int((class_labels == c).sum()) for c in PATTERN_CLASSES},
    )


def _with(grid: Sequence[float], headline: float) -> tuple[float, ...]:
    return tuple(sorted({float(x) for x in grid} | {float(headline)}))


def _metrics(
    o: FunctionOutcome,
    weight_gb: FloatArray,
    reference_gb_s: FloatArray,
    mask: NDArray[np.bool_] | None,
) -> Metrics:
    """Metrics over the functions in `mask`; waste is normalised to the reference run's
    waste over the same functions."""
    keep = np.ones(o.invocations.shape[0], dtype=bool) if mask is None else mask
    inv = o.invocations[keep]
    cold = o.cold_starts[keep]
    active = inv > 0
    pct = 100.0 * cold[active] / inv[active]
    q = np.percentile(pct, [50, 75, 90]) if pct.size else np.zeros(3)  # linear interpolation
    waste = float((o.idle_warm_s[keep] * weight_gb[keep]).sum())
    reference = float(reference_gb_s[keep].sum())
    total = int(inv.sum())
    return Metrics(
        invocations=total,
        cold_starts=int(cold.sum()),
        cold_start_rate=float(cold.sum() / total) if total else 0.0,
        q3_function_cold_start_pct=float(q[1]),
        median_function_cold_start_pct=float(q[0]),
        p90_function_cold_start_pct=float(q[2]),
        wasted_memory_gb_s=waste,
        wasted_memory_normalized_pct=(100.0 * waste / reference if reference > 0 else float("nan")),
        loads=int(o.loads[keep].sum()),
    )

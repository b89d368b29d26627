"""Held-out splits of a trace: LSTH against HHP on functions and hours it was not tuned on.

Owns: the split definitions (`trace_splits`: train/test by a hash of the function ID,
early/late by time, and their crossings), `evaluate_splits` (LSTH at every γ of the sweep
and HHP's headline on each split, once per arrival seed) and the per-split figures
(`SplitResult`: cold starts and wasted memory-time relative to HHP, seed by seed).

Pure: no I/O, no clock (hashing an ID is not I/O).

The splits:
* by function: a function is *train* when the first byte of sha256(salt + its ID) is below
  128, else *test* — about half each, fixed by the IDs alone, so any trace splits the same
  way every time;
* by time: *early* is the first half of the minutes (the trace cut there: every policy
  starts from nothing, the first call of each function is cold for all); *late* is the
  second half, counted after the first half as history (every policy learns from t = 0,
  invocations and idle time are counted from the half on: the evaluation's warm-up).
The tuning split is train/early: LSTH's parameters were chosen there (docs/coldstart.md),
and every other split holds out the functions, the hours, or both.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from infless.coldstart.histogram import FloatArray
from infless.offline.coldstart.evaluate import EvalConfig, Metrics, evaluate

TUNING_SPLIT = "train/early"


@dataclass(frozen=True, slots=True)
class Split:
    """A subset of a trace: some functions, and the minutes counted."""

    name: str
    role: str  # what it holds out from the tuning split
    functions: NDArray[np.bool_]  # mask over the trace's functions
    end_min: int  # minutes replayed: the trace is cut here
    warmup_min: int  # minutes replayed as history only, not counted


@dataclass(frozen=True, slots=True)
class Spread:
    """A figure over the arrival seeds: mean, lowest, highest."""

    mean: float
    low: float
    high: float

    @staticmethod
    def of(values: Sequence[float]) -> Spread:
        if not values:
            raise ValueError("a spread needs at least one value")
        return Spread(float(np.mean(values)), float(min(values)), float(max(values)))


@dataclass(frozen=True, slots=True)
class SplitRun:
    """One split replayed with one arrival seed."""

    seed: int
    hhp: Metrics
    lsth: dict[float, Metrics]  # by γ


@dataclass(frozen=True, slots=True)
class SplitResult:
    name: str
    role: str
    functions: int
    minutes_counted: int
    headline_gamma: float
    runs: tuple[SplitRun, ...]

    @property
    def gammas(self) -> tuple[float, ...]:
        return tuple(sorted(self.runs[0].lsth))

    def cold_delta_pct(self, gamma: float | None = None) -> Spread:
        """LSTH's cold starts relative to HHP's, in percent (negative: fewer)."""
        g = self.headline_gamma if gamma is None else gamma
        return Spread.of([_delta(r.lsth[g].cold_starts, r.hhp.cold_starts) for r in self.runs])

    def waste_delta_pct(self, gamma: float | None = None) -> Spread:
        """LSTH's wasted memory-time relative to HHP's, in percent (negative: less)."""
        g = self.headline_gamma if gamma is None else gamma
        return Spread.of(
            [_delta(r.lsth[g].wasted_memory_gb_s, r.hhp.wasted_memory_gb_s) for r in self.runs]
        )

    def mean(self, policy: str, field: str, gamma: float | None = None) -> float:
        """A metric of HHP or LSTH (at γ, default the headline) averaged over the seeds."""
        g = self.headline_gamma if gamma is None else gamma
        values = [getattr(r.hhp if policy == "hhp" else r.lsth[g], field) for r in self.runs]
        return float(np.mean(values))


def _delta(value: float, base: float) -> float:
    return 100.0 * (value / base - 1.0) if base else 0.0


def train_mask(function_ids: Sequence[str], salt: str = "") -> NDArray[np.bool_]:
    """True for the functions of the train split (see the module docstring)."""
    return np.array(
        [hashlib.sha256(f"{salt}{f}".encode()).digest()[0] < 128 for f in function_ids],
        dtype=bool,
    )


def trace_splits(function_ids: Sequence[str], n_minutes: int, salt: str = "") -> list[Split]:
    """The tuning split, the three held out from it, and the four halves."""
    if n_minutes < 2:
        raise ValueError(f"the trace has {n_minutes} minute(s); a time split needs >= 2")
    train = train_mask(function_ids, salt)
    every = np.ones_like(train)
    half = n_minutes // 2
    early, late = (half, 0), (n_minutes, half)
    return [
        Split(TUNING_SPLIT, "nothing: tuning", train, *early),
        Split("train/late", "hours", train, *late),
        Split("test/early", "functions", ~train, *early),
        Split("test/late", "functions and hours", ~train, *late),
        Split("train", "late hours", train, n_minutes, 0),
        Split("test", "functions", ~train, n_minutes, 0),
        Split("early", "test functions", every, *early),
        Split("late", "hours", every, *late),
    ]


def evaluate_splits(
    counts: NDArray[np.int64],
    memory_mb: FloatArray,
    splits: Sequence[Split],
    cfg: EvalConfig,
    seeds: Sequence[int],
) -> list[SplitResult]:
    """HHP (its headline range) and LSTH (every γ of `cfg`) on each split, once per seed."""
    if not seeds:
        raise ValueError("seeds is empty: give at least one arrival seed")
    base = replace(cfg, policies=("hhp", "lsth"), hhp_range_h=(cfg.hhp_headline_h,))
    results = []
    for split in splits:
        sub_counts = counts[split.functions, : split.end_min]
        sub_memory = memory_mb[split.functions]
        runs = []
        for seed in seeds:
            run_cfg = replace(base, seed=seed, warmup_min=split.warmup_min)
            result = evaluate(sub_counts, sub_memory, run_cfg)
            lsth = {p.param: p.metrics for p in result.results["lsth"].curve}
            runs.append(SplitRun(seed, result.results["hhp"].headline, lsth))
        results.append(
            SplitResult(
                name=split.name,
                role=split.role,
                functions=int(split.functions.sum()),
                minutes_counted=split.end_min - split.warmup_min,
                headline_gamma=cfg.lsth_headline_gamma,
                runs=tuple(runs),
            )
        )
    return results

"""Combined-operator prediction versus measured batch latency for every zoo model.

For each model, batch sizes {1, 2, 4, 8, 16, 32} and threads {1, 2}: the whole model's forward,
with the weights a worker serves, is measured in this process the way operators are profiled
(the calling thread's CPU clock, i.e. the latency on dedicated cores; mean of the fastest
half of the repetitions; thread counts interleaved) and compared
with the prediction without the safety offset. Missing operator profiles are measured first
into the profile DB (run `infless profile` beforehand to keep that out of the bench). Prints the
mean and p90 absolute percentage error per model and overall, the cost of predicting for a
newly registered model, and ends with one line of JSON.

    .venv/bin/python bench/predictor.py [--models a,b] [--quick] [--db PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from infless.models.zoo import ZOO
from infless.profiler.database import ProfileDatabase
from infless.profiler.operators import ProfilePlan, ProfileProgress
from infless.profiler.predictor import CombinedOperatorPredictor
from infless.profiler.service import (
    build_predictor,
    default_db_path,
    graph_for,
    measure_model_ms,
    model_source,
)

BATCHES = (1, 2, 4, 8, 16, 32)
QUICK_BATCHES = (1, 4, 16)
THREADS = (1, 2)


def _p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]


def _prediction_cost_ms(db_path: Path, state_dir: Path, name: str) -> tuple[float, float, float]:
    """(load profiles + register + b x c table, one prediction, register only) in ms."""
    graph = graph_for(model_source(name), state_dir)
    started = time.perf_counter()
    with ProfileDatabase(db_path) as db:
        predictor = build_predictor(db, [graph], offset_pct=0.0)
    loaded = time.perf_counter()
    predictor.register("newly-deployed", graph)
    registered = time.perf_counter()
    for b in BATCHES:
        for c in THREADS:
            predictor.predict_latency_ms("newly-deployed", b, c)
    table_done = time.perf_counter()
    one_started = time.perf_counter()
    predictor.predict_latency_ms("newly-deployed", 3, 1)
    one_ms = (time.perf_counter() - one_started) * 1000.0
    total_ms = (table_done - started) * 1000.0
    return total_ms, one_ms, (registered - loaded) * 1000.0


@dataclass
class Results:
    errors: dict[str, list[float]] = field(default_factory=dict)  # |err| %, typical times
    min_errors: dict[str, list[float]] = field(default_factory=dict)  # |err| %, fastest reps
    max_mode_errors: list[float] = field(default_factory=list)  # the paper's max-of-branches
    wall_errors: list[float] = field(default_factory=list)  # against the wall clock
    spreads: list[float] = field(default_factory=list)


def _measure_all(
    names: list[str],
    batches: tuple[int, ...],
    predictors: dict[str, CombinedOperatorPredictor],
    budget_s: float,
) -> Results:
    results = Results()
    header = f"{'model':<16} {'b':>3} {'c':>2} {'pred ms':>10} {'meas ms':>10} {'err %':>7}"
    print(f"{header} {'spread':>6} {'min-err %':>9} {'wall ms':>10} {'wall-err %':>10}")
    typical, fastest, max_mode = predictors["typical"], predictors["min"], predictors["max"]
    for name in names:
        source = model_source(name)
        model = source.build_served()
        for batch in batches:
            big = typical.predict_raw_ms(name, batch, 1) > 1000.0  # fewer repetitions there
            found = measure_model_ms(
                model, source, batch, THREADS, budget_s=1.0 if big else budget_s, min_reps=3
            )
            for cpus in THREADS:
                measured = found[cpus]
                predicted = typical.predict_raw_ms(name, batch, cpus)
                err = 100.0 * (predicted - measured.fast_ms) / measured.fast_ms
                min_err = 100.0 * (fastest.predict_raw_ms(name, batch, cpus) / measured.min_ms - 1)
                max_err = 100.0 * (
                    max_mode.predict_raw_ms(name, batch, cpus) / measured.fast_ms - 1
                )
                results.errors.setdefault(name, []).append(abs(err))
                results.min_errors.setdefault(name, []).append(abs(min_err))
                results.max_mode_errors.append(abs(max_err))
                wall_err = 100.0 * (predicted / measured.wall_fast_ms - 1)
                results.wall_errors.append(abs(wall_err))
                results.spreads.append(measured.spread)
                print(
                    f"{name:<16} {batch:>3} {cpus:>2} {predicted:>10.3f} {measured.fast_ms:>10.3f} "
                    f"{err:>+7.1f} {measured.spread:>6.2f} {min_err:>+9.1f} "
                    f"{measured.wall_fast_ms:>10.3f} {wall_err:>+10.1f}",
                    flush=True,
                )
        del model
    return results


def _summarise(names: list[str], results: Results) -> tuple[float, dict[str, dict[str, float]]]:
    print()
    print(f"{'model':<16} {'mean |err| %':>12} {'p90 |err| %':>12} {'min-based mean %':>17}")
    per_model = {}
    for name in names:
        errors = results.errors[name]
        mean, p90 = statistics.fmean(errors), _p90(errors)
        per_model[name] = {"mean": round(mean, 2), "p90": round(p90, 2)}
        min_mean = statistics.fmean(results.min_errors[name])
        print(f"{name:<16} {mean:>12.1f} {p90:>12.1f} {min_mean:>17.1f}")
    every = [e for values in results.errors.values() for e in values]
    overall = statistics.fmean(every)
    overall_min = statistics.fmean([e for values in results.min_errors.values() for e in values])
    print(f"{'overall':<16} {overall:>12.1f} {_p90(every):>12.1f} {overall_min:>17.1f}")
    print(
        "with the paper's max-of-branches rule instead of eager PyTorch's sum: overall mean "
        f"{statistics.fmean(results.max_mode_errors):.1f}%"
    )
    print(
        "against the wall clock (includes waiting for cores other processes hold): overall "
        f"mean {statistics.fmean(results.wall_errors):.1f}%"
    )
    return overall, per_model


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="", help="comma-separated zoo models (default: all)")
    parser.add_argument("--quick", action="store_true", help=f"batches {QUICK_BATCHES} only")
    parser.add_argument("--state-dir", type=Path, default=Path("state"))
    parser.add_argument("--db", type=Path, default=None, help="default: STATE_DIR/profiles.sqlite")
    parser.add_argument("--budget-s", type=float, default=0.6, help="measuring time per point")
    args = parser.parse_args(argv)

    names = [n for n in args.models.split(",") if n] or list(ZOO)
    db_path = args.db or default_db_path(args.state_dir)
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    graphs = {name: graph_for(model_source(name), args.state_dir) for name in names}
    with ProfileDatabase(db_path) as db:
        log = ProfileProgress(log=lambda line: print(f"  profile {line}", file=sys.stderr)).log
        plan = ProfilePlan(threads=THREADS)
        predictors = {
            "typical": build_predictor(
                db, graphs.values(), plan=plan, offset_pct=0.0, log_line=log
            ),
            "min": build_predictor(db, graphs.values(), offset_pct=0.0, statistic="min"),
            "max": build_predictor(db, graphs.values(), offset_pct=0.0, branch_mode="max"),
        }
    print(f"profiles ready in {time.perf_counter() - started:.0f} s ({db_path})")

    results = _measure_all(
        names, QUICK_BATCHES if args.quick else BATCHES, predictors, args.budget_s
    )
    overall, per_model = _summarise(names, results)
    total_ms, one_ms, register_ms = _prediction_cost_ms(db_path, args.state_dir, names[0])
    print(
        f"prediction cost for a newly registered model ({names[0]}'s graph, operators profiled): "
        f"{total_ms:.1f} ms to load its profiles, register it and predict "
        f"{len(BATCHES) * len(THREADS)} configurations (register alone {register_ms:.2f} ms, "
        f"one prediction {one_ms * 1000:.0f} us)"
    )
    print(
        f"noise: load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after; median "
        f"spread (IQR/median) of the model measurements {statistics.median(results.spreads):.2f}, "
        f"max {max(results.spreads):.2f}; total {time.perf_counter() - started:.0f} s"
    )
    print(json.dumps({"overall_mean_abs_pct_error": round(overall, 2), "per_model": per_model}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

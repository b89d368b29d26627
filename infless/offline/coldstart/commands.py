"""`infless coldstart-eval`: replay an Azure trace through the cold-start policies.

Owns: the subcommand's arguments, reading the files, timing the run and printing (table,
summary, plot, and with --json one JSON object as the last line of stdout). Must not hold
evaluation logic (that is `evaluate.py`) or formatting beyond wiring (that is `report.py`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from infless.clock import perf_s
from infless.coldstart.config import HistogramConfig
from infless.extras import PLOTS, MissingExtra, require_extra
from infless.offline.coldstart.evaluate import POLICIES, EvalConfig, evaluate
from infless.offline.coldstart.trace import (
    DEFAULT_MEMORY_MB,
    classify_patterns,
    load_memory,
    load_trace,
    memory_per_function,
)

_DEFAULTS = EvalConfig()


def _floats(flag: str) -> Callable[[str], tuple[float, ...]]:
    def parse(text: str) -> tuple[float, ...]:
        try:
            values = tuple(float(x) for x in text.split(",") if x.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{flag} {text!r}: expected comma-separated numbers, e.g. 0.3,0.5,0.7"
            ) from None
        if not values:
            raise argparse.ArgumentTypeError(f"{flag} is empty: give at least one number")
        return values

    return parse


def _policies(text: str) -> tuple[str, ...]:
    names = tuple(x.strip() for x in text.split(",") if x.strip())
    unknown = [n for n in names if n not in POLICIES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"--policy {text!r}: unknown {', '.join(unknown) or '(empty)'}; "
            f"choose from {','.join(POLICIES)}"
        )
    return names


def _join(values: tuple[float, ...]) -> str:
    return ",".join(f"{v:g}" for v in values)


def configure(parser: argparse.ArgumentParser, name: str) -> None:
    del name
    h = HistogramConfig()
    add = parser.add_argument
    add("--trace", type=Path, required=True, help="invocation counts CSV (sample or 2019 schema)")
    add("--memory", type=Path, help="app memory CSV (AverageAllocatedMb per app)")
    add(
        "--default-memory-mb",
        type=float,
        default=DEFAULT_MEMORY_MB,
        help="memory of every function when --memory is not given (default %(default)s)",
    )
    add("--policy", type=_policies, default=POLICIES, help="comma list (default all)")
    add(
        "--gamma",
        type=_floats("--gamma"),
        default=_DEFAULTS.lsth_gammas,
        help=f"LSTH γ sweep (default {_join(_DEFAULTS.lsth_gammas)})",
    )
    add(
        "--lsth-gamma",
        type=float,
        default=_DEFAULTS.lsth_headline_gamma,
        help="LSTH headline γ (default %(default)s)",
    )
    add(
        "--keepalive-min",
        type=_floats("--keepalive-min"),
        default=_DEFAULTS.fixed_keepalive_min,
        help=f"fixed keep-alive sweep (default {_join(_DEFAULTS.fixed_keepalive_min)})",
    )
    add(
        "--hhp-range-h",
        type=_floats("--hhp-range-h"),
        default=_DEFAULTS.hhp_range_h,
        help=f"HHP histogram range sweep (default {_join(_DEFAULTS.hhp_range_h)}; headline 4)",
    )
    add("--long-window-min", type=int, default=_DEFAULTS.long_window_min)
    add("--short-window-min", type=int, default=_DEFAULTS.short_window_min)
    add("--short-min-its", type=int, default=_DEFAULTS.short_min_its)
    add(
        "--short-sampling",
        choices=("minute", "request"),
        default="minute" if _DEFAULTS.short_per_minute else "request",
        help="LSTH's short histogram: one idle time per active minute, or per request "
        "(default %(default)s)",
    )
    add("--range-min", type=int, default=h.range_min, help="LSTH histogram range")
    add(
        "--min-its",
        type=int,
        default=h.min_its,
        help="fewest in-range ITs for a representative histogram",
    )
    add("--cv-threshold", type=float, default=h.cv_threshold)
    add("--margin", type=float, default=h.margin)
    add("--oob-threshold", type=float, default=h.oob_threshold)
    add("--arima-margin", type=float, default=h.arima_margin)
    add("--seed", type=int, default=0, help="arrival synthesis seed (default %(default)s)")
    add(
        "--warmup-min",
        type=int,
        default=0,
        help="exclude the first N minutes from metrics for every policy (default 0)",
    )
    add(
        "--split",
        action="store_true",
        help="also report LSTH vs HHP per split: train/test by function hash, early/late by "
        "time, and their crossings (docs/coldstart.md)",
    )
    add(
        "--split-seeds",
        type=int,
        default=3,
        help="arrival seeds per split, from --seed on (default %(default)s): the spread",
    )
    add(
        "--split-salt",
        default="",
        help="salt of the function-hash split (default none); another salt, another split",
    )
    add("--plot", type=Path, help="write the trade-off curves to this PNG")
    add("--json", action="store_true", help="end stdout with one JSON object")


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    console = Console(width=160)
    started = perf_s()
    try:
        trace = load_trace(args.trace)
        memory = load_memory(args.memory) if args.memory else None
        histogram = HistogramConfig(
            range_min=args.range_min,
            min_its=args.min_its,
            cv_threshold=args.cv_threshold,
            margin=args.margin,
            oob_threshold=args.oob_threshold,
            arima_margin=args.arima_margin,
        )
        cfg = replace(
            _DEFAULTS,
            policies=args.policy,
            fixed_keepalive_min=args.keepalive_min,
            hhp_range_h=args.hhp_range_h,
            lsth_gammas=args.gamma,
            lsth_headline_gamma=args.lsth_gamma,
            long_window_min=args.long_window_min,
            short_window_min=args.short_window_min,
            short_min_its=args.short_min_its,
            short_per_minute=args.short_sampling == "minute",
            histogram=histogram,
            seed=args.seed,
            warmup_min=args.warmup_min,
        )
        if args.plot:
            require_extra("matplotlib", PLOTS, "--plot")
        if args.split_seeds < 1:
            raise ValueError(f"--split-seeds {args.split_seeds}: give at least 1")
        if args.split and not {"hhp", "lsth"} <= set(args.policy):
            raise ValueError(
                f"--split compares LSTH with HHP: --policy {','.join(args.policy)} "
                "must include both"
            )
    except (OSError, ValueError, MissingExtra) as exc:
        print(f"coldstart-eval: {exc}", file=sys.stderr)
        return 2
    memory_mb, defaulted = memory_per_function(trace, memory, args.default_memory_mb)
    result = evaluate(trace.counts, memory_mb, cfg, classify_patterns(trace.counts))
    elapsed_s = perf_s() - started

    from infless.offline.coldstart.report import (
        finite,
        param_label,
        print_report,
        to_json,
        write_plot,
    )

    title = (
        f"{args.trace.name}: {result.functions} functions x {trace.n_minutes} min, "
        f"{result.invocations:,} invocations, seed {cfg.seed}, warm-up {cfg.warmup_min} min"
    )
    print_report(result, console, title)
    console.print(
        f"memory: {'defaulted' if memory is None else 'from ' + str(args.memory)}"
        f" ({defaulted} functions on the default); evaluated in {elapsed_s:.2f} s",
        highlight=False,
    )
    if args.plot:
        write_plot(result, args.plot)
        console.print(f"plot written to {args.plot}", highlight=False)
    figures = to_json(result)
    if args.split:
        from infless.offline.coldstart.split_report import gamma_table, split_table, splits_json
        from infless.offline.coldstart.splits import evaluate_splits, trace_splits

        started = perf_s()
        splits = trace_splits(trace.function_ids, trace.n_minutes, args.split_salt)
        seeds = [cfg.seed + k for k in range(args.split_seeds)]
        by_split = evaluate_splits(trace.counts, memory_mb, splits, cfg, seeds)
        hhp_label = param_label(result.results["hhp"], cfg.hhp_headline_h)
        console.print(split_table(by_split, hhp_label))
        console.print(gamma_table(by_split))
        console.print(
            f"splits: function hash salt {args.split_salt!r}, seeds {seeds}, "
            f"LSTH short histogram per {args.short_sampling}; "
            f"evaluated in {perf_s() - started:.2f} s",
            highlight=False,
        )
        figures["splits"] = finite(splits_json(by_split))
    if args.json:
        sys.stdout.flush()
        print(json.dumps(figures, allow_nan=False, sort_keys=False))
    return 0

"""The command line: `infless loadgen MODE` and `python -m loadgen MODE`.

Modes: replay, synthetic, max-rate, classify.

Parses arguments (the flags every load mode shares are `cliargs`'s) into workload specs and
run options, then hands over to `runner`. Exposes `configure(parser, name)` and
`run(args) -> int` for infless's subcommand table. Must not import `infless`; heavy imports
(aiohttp, matplotlib) wait until `run`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import shlex
import sys
from pathlib import Path
from typing import Any

from loadgen.cliargs import add_common_flags

# Copies of traces.PATTERN_CLASSES and workloads.SYNTHETIC_SHAPES (a test keeps them equal), so
# building the parser does not import numpy.
PATTERN_CLASSES = ("idle", "sporadic", "periodic", "bursty", "other")
SYNTHETIC_SHAPES = ("constant", "poisson", "step", "ramp", "burst")
CLOSED = "closed"  # the closed-loop shape (workloads.ClosedLoopSpec), beside the schedules


def _names(values: list[str] | None) -> list[str]:
    return [n.strip() for v in values or [] for n in v.split(",") if n.strip()]


def _rates(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(r) for r in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--rates {text!r}: use comma-separated rps") from None


def configure(parser: argparse.ArgumentParser, name: str) -> None:
    sub = parser.add_subparsers(dest="loadgen_mode", metavar="MODE", required=True)

    replay = sub.add_parser("replay", help="replay Azure trace rows onto deployed functions")
    replay.add_argument("--trace", type=Path, required=True, help="per-minute invocation CSV")
    pick = replay.add_mutually_exclusive_group(required=True)
    pick.add_argument(
        "--row-id", action="append", help="HashFunction (or unique prefix); repeatable"
    )
    pick.add_argument(
        "--pattern",
        choices=[c for c in PATTERN_CLASSES if c != "idle"],
        help="choose rows of this class (see `classify`)",
    )
    replay.add_argument(
        "--rows", type=int, default=1, help="rows to choose with --pattern (default 1)"
    )
    replay.add_argument(
        "--min-invocations",
        type=int,
        default=100,
        help="with --pattern: only rows with at least this many a day (default 100)",
    )
    replay.add_argument(
        "--functions", action="append", help="function names (default: all deployed)"
    )
    replay.add_argument(
        "--start-minute",
        default="busiest",
        help="0-based first trace minute, or 'busiest' (default)",
    )
    replay.add_argument(
        "--minutes", type=int, default=6, help="trace minutes to replay (default 6)"
    )
    replay.add_argument(
        "--minute-seconds",
        type=float,
        default=10.0,
        help="run seconds per trace minute (default 10)",
    )
    scale = replay.add_mutually_exclusive_group()
    scale.add_argument(
        "--peak-rps", type=float, help="scale each row's window peak to this rate (default 5)"
    )
    scale.add_argument(
        "--scale", type=float, help="multiply counts instead (1 keeps the trace's counts)"
    )
    add_common_flags(replay)

    synth = sub.add_parser("synthetic", help="constant/poisson/step/ramp/burst load")
    synth.add_argument("--shape", choices=(*SYNTHETIC_SHAPES, CLOSED), default="poisson")
    synth.add_argument(
        "--concurrency",
        type=int,
        help="--shape closed: clients per function, each sending on its answer (default 1)",
    )
    synth.add_argument("--rate-rps", type=float, default=5.0, help="per function (default 5)")
    synth.add_argument("--duration-s", type=float, default=30.0, help="default 30")
    synth.add_argument("--rates", type=_rates, default=(), help="step levels, e.g. 2,5,10")
    synth.add_argument("--step-s", type=float, default=10.0, help="seconds per step level")
    synth.add_argument("--ramp-to-rps", type=float, default=0.0, help="ramp end rate")
    synth.add_argument("--on-s", type=float, default=5.0, help="burst on-time")
    synth.add_argument("--off-s", type=float, default=5.0, help="burst off-time")
    synth.add_argument("--off-rate-rps", type=float, default=0.0, help="rate while off")
    synth.add_argument(
        "--functions", action="append", help="function names (default: all deployed)"
    )
    add_common_flags(synth)

    search = sub.add_parser("max-rate", help="search the highest rate that meets the SLO")
    search.add_argument("--function", help="function to drive (default: the first deployed)")
    search.add_argument("--start-rps", type=float, default=5.0)
    search.add_argument("--growth", type=float, default=2.0, help="rate factor while passing")
    search.add_argument("--max-steps", type=int, default=8)
    search.add_argument("--step-s", type=float, default=10.0, help="seconds per step (default 10)")
    search.add_argument("--max-rate-rps", type=float, default=2000.0)
    search.add_argument("--precision", type=float, default=0.1, help="stop bisecting at this gap")
    search.add_argument("--pause-s", type=float, default=1.0, help="idle seconds between steps")
    add_common_flags(search)

    classify = sub.add_parser("classify", help="show trace rows with their pattern class (offline)")
    classify.add_argument("--trace", type=Path, required=True)
    classify.add_argument("--pattern", choices=PATTERN_CLASSES, help="only this class")
    classify.add_argument("--limit", type=int, default=20, help="rows to list (default 20)")
    del name  # the same options under either program name


def _classify(args: argparse.Namespace) -> int:
    from loadgen.traces import classify_counts, read_trace, row_features

    rows = read_trace(args.trace)
    counts: dict[str, int] = dict.fromkeys(PATTERN_CLASSES, 0)
    shown = 0
    print(f"{'function id':<24} {'class':<9} {'total':>9} {'active':>6} {'peak':>6} {'gap cv':>6}")
    for row in rows:
        features = row_features(row.counts_per_minute)
        kind = classify_counts(row.counts_per_minute)
        counts[kind] += 1
        if (args.pattern is None or kind == args.pattern) and shown < args.limit:
            shown += 1
            print(
                f"{row.function_id[:24]:<24} {kind:<9} {row.total_invocations:>9} "
                f"{features.active_minutes:>6} {features.peak_count:>6} {features.gap_cv:>6.2f}"
            )
    print("classes: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    return 0


def _options(args: argparse.Namespace, base_url: str, kind: str) -> Any:
    from loadgen.auth import load_credentials
    from loadgen.runner import RunOptions

    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return RunOptions(
        base_url=base_url,
        out_dir=args.out or Path("loadgen-reports") / f"{kind}-{stamp}",
        seed=args.seed,
        timeout_s=args.timeout_s,
        max_duration_s=args.max_duration_s,
        max_requests=args.max_requests,
        max_connections=args.max_connections,
        poll_interval_s=args.poll_interval_s,
        bodies_per_function=args.bodies,
        seq_len_range=args.seq_len,
        slo_ms=args.slo_ms,
        command=getattr(args, "command_line", None) or shlex.join(["infless", *sys.argv[1:]]),
        body_format=args.body_format,
        route=args.route,
        credentials=load_credentials(args.token, args.user, args.password_file),
        allow_remote=args.allow_remote,
    )


def _replay_schedule(args: argparse.Namespace, function_names: list[str]) -> Any:
    from loadgen import traces, workloads

    rows = traces.read_trace(args.trace)
    if args.row_id:
        chosen = traces.find_rows(rows, _names(args.row_id))
    else:
        chosen = traces.choose_rows_by_pattern(
            rows, args.pattern, args.rows, args.seed, args.min_invocations
        )
    if args.start_minute == "busiest":
        start = traces.busiest_window_start(chosen, args.minutes)
    else:
        try:
            start = int(args.start_minute)
        except ValueError:
            raise ValueError(
                f"--start-minute {args.start_minute!r}: an integer or 'busiest'"
            ) from None
    peak_rps = args.peak_rps if args.peak_rps is not None or args.scale is not None else 5.0
    spec = workloads.ReplaySpec(
        start_minute=start,
        minutes=args.minutes,
        minute_s=args.minute_seconds,
        seed=args.seed,
        peak_rps=peak_rps,
        scale=args.scale or 1.0,
    )
    pairs = workloads.pair_rows_with_functions(chosen, function_names)
    return workloads.replay_schedule(pairs, spec, args.max_requests, args.max_duration_s)


def _closed_loop_plan(args: argparse.Namespace, names: list[str]) -> Any:
    from loadgen.workloads import ClosedLoopSpec, closed_loop_plan

    concurrency = 1 if args.concurrency is None else args.concurrency
    spec = ClosedLoopSpec(concurrency=concurrency, duration_s=args.duration_s)
    return closed_loop_plan(spec, names, args.max_requests, args.max_duration_s)


def _finish(records: Any, out_dir: Path) -> int:
    """Print the outcome; 1 when the gateway refused requests for lack of credentials."""
    from loadgen.auth import AUTH_FLAGS, TOKEN_FLAG

    ok = sum(1 for r in records if r.ok)
    print(f"{len(records)} requests, {ok} ok, {len(records) - ok} failed")
    print(f"report: {out_dir}/report.md")
    unauthorized = sum(1 for r in records if r.status == 401)
    if unauthorized:
        print(
            f"loadgen: {unauthorized} requests were refused with HTTP 401 (unauthorized): "
            f"pass {TOKEN_FLAG} or {AUTH_FLAGS}",
            file=sys.stderr,
        )
        return 1
    return 0


def run(args: argparse.Namespace) -> int:
    if args.loadgen_mode == "classify":
        return _classify(args)
    if importlib.util.find_spec("matplotlib") is None:  # a run's report draws PNG plots
        print(
            "loadgen: a run's report needs matplotlib, which is not installed; "
            "install it with: pip install 'infless[plots]'",
            file=sys.stderr,
        )
        return 2
    return _run_load(args)


def _run_load(args: argparse.Namespace) -> int:
    from loadgen import runner
    from loadgen.functions import TargetError, check_target
    from loadgen.maxrate import SearchConfig
    from loadgen.progress import make_progress
    from loadgen.traces import TraceFormatError
    from loadgen.workloads import SyntheticSpec, synthetic_schedule

    try:
        base_url = check_target(args.gateway, args.allow_remote)
        kind = args.loadgen_mode
        options = _options(args, base_url, kind)
        progress = make_progress(not args.no_progress)
        if kind == "max-rate":
            search = SearchConfig(
                start_rps=args.start_rps,
                growth=args.growth,
                max_steps=args.max_steps,
                max_rate_rps=args.max_rate_rps,
                precision=args.precision,
                pause_s=args.pause_s,
                step_s=args.step_s,
            )
            names = [args.function] if args.function else []
            functions = runner.run_async(
                lambda: runner.discover_functions(base_url, names, options.credentials)
            )
            state = runner.run_async(
                lambda: runner.run_max_rate(
                    functions[0],
                    search,
                    options,
                    progress,
                    on_step=lambda step, rate, verdict: print(
                        f"step {step}: {rate:.1f} rps: {verdict}"
                    ),
                )
            )
            print(f"max sustainable rate for {functions[0].name}: {state.result_rps} rps")
        else:
            functions = runner.run_async(
                lambda: runner.discover_functions(
                    base_url, _names(args.functions), options.credentials
                )
            )
            names = [f.name for f in functions]
            if kind == "synthetic" and args.shape == CLOSED:
                plan = _closed_loop_plan(args, names)
                print(f"{plan.description}: {len(plan.clients)} clients", file=sys.stderr)
                result, _ = runner.run_async(
                    lambda: runner.run_closed_loop(plan, functions, options, progress)
                )
                return _finish(result.records, options.out_dir)
            if kind == "synthetic" and args.concurrency is not None:
                raise ValueError(
                    f"--concurrency {args.concurrency} applies to --shape closed only "
                    f"(not --shape {args.shape})"
                )
            if kind == "replay":
                schedule = _replay_schedule(args, names)
            else:
                spec = SyntheticSpec(
                    shape=args.shape,
                    rate_rps=args.rate_rps,
                    duration_s=args.duration_s,
                    seed=args.seed,
                    rates_rps=args.rates,
                    step_s=args.step_s,
                    ramp_to_rps=args.ramp_to_rps,
                    on_s=args.on_s,
                    off_s=args.off_s,
                    off_rate_rps=args.off_rate_rps,
                )
                schedule = synthetic_schedule(spec, names, args.max_requests, args.max_duration_s)
            print(f"{schedule.description}: {len(schedule.arrivals)} requests", file=sys.stderr)
            result, _ = runner.run_async(
                lambda: runner.run_schedule(kind, schedule, functions, options, progress)
            )
            return _finish(result.records, options.out_dir)
        print(f"report: {options.out_dir}/report.md")
    except (TargetError, TraceFormatError, ValueError) as exc:
        print(f"loadgen: {exc}", file=sys.stderr)
        return 2
    except runner.GatewayError as exc:
        print(f"loadgen: {exc}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="loadgen", description=__doc__.splitlines()[0])
    configure(parser, "loadgen")
    args = parser.parse_args(argv)
    args.command_line = shlex.join(
        ["python", "-m", "loadgen", *(sys.argv[1:] if argv is None else argv)]
    )
    return run(args)

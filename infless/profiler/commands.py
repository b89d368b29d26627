"""`infless profile` and `infless predict`: fill the operator profile DB, print predicted tables.

    infless profile [NAMES...] [--quick] [--db PATH] [--max-threads N]
    infless profile --gpu NAMES [--shares 10,20,30,50,100] [--mps-pipe-dir DIR] [--uuid GPU-…]
        [--batch-sizes 1,2,4,8,16,32] [--rounds N] [--dtype fp32|bf16]
    infless predict NAME [--measure] [--speed-now] [--json] [--db PATH] [--max-threads N]

NAMES are zoo model names or function package directories. `profile` without `--quick`
covers every zoo model's operators plus those of NAMES; `--quick` only those of NAMES.
`profile --gpu` measures each of NAMES whole on a GPU (the first NVML reports, or `--uuid`)
at each share, one process per share (`profiler.gpu_profile`); shares below 100 % need the
server's MPS daemon (`--mps-pipe-dir`), without it only 100 % is measured. The planner
prices GPU shares from those rows (`scaling.gpu_profiles`).
Torch is imported inside `run` only, so `infless --help` stays instant.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from infless.clock import perf_s
from infless.errors import InflessError

if TYPE_CHECKING:
    from infless.progress import Reporter

DEFAULT_BATCHES = (1, 2, 4, 8, 16, 32)


def configure(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument(
        "--state-dir", type=Path, default=Path("state"), help="state directory (default: state)"
    )
    parser.add_argument(
        "--db",
        type=Path,
        default=None,
        help="profile database (default: STATE_DIR/profiles.sqlite)",
    )
    parser.add_argument(
        "--max-threads",
        type=int,
        default=None,
        help="profile CPU threads 1..N (default: all cores)",
    )
    parser.add_argument(
        "--budget-ms",
        type=float,
        default=100.0,
        help="measuring time per operator configuration after warm-up (default: 100)",
    )
    if name == "profile":
        parser.add_argument("names", nargs="*", metavar="NAME", help="zoo models or package dirs")
        parser.add_argument(
            "-q", "--quiet", action="store_true", help="only the summary and failures (no progress)"
        )
        parser.add_argument(
            "--quick", action="store_true", help="only the operators NAMES need (not the whole zoo)"
        )
        parser.add_argument(
            "--recalibrate",
            action="store_true",
            help="measure the per-call overheads and the effective cache size again",
        )
        parser.add_argument(
            "--remeasure",
            action="store_true",
            help="measure profiled configurations again, keeping the faster figure (a second "
            "pass on a busy machine)",
        )
        _configure_gpu(parser)
    else:
        parser.add_argument("name", metavar="NAME", help="a zoo model or a function package dir")
        parser.add_argument(
            "--measure",
            action="store_true",
            help="also measure the model at each configuration, each paired with the reference "
            "kernel and predicted for the machine's speed while it was measured",
        )
        parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
        parser.add_argument(
            "--speed-now",
            action="store_true",
            help="time the reference kernel and predict for the machine's speed at this moment "
            "(default: the profiles' typical speed)",
        )
        parser.add_argument(
            "--batches",
            default=",".join(map(str, DEFAULT_BATCHES)),
            help="comma-separated batch sizes (default: 1,2,4,8,16,32)",
        )
        parser.add_argument(
            "--offset-pct", type=float, default=None, help="safety offset in percent (default: 10)"
        )
        parser.add_argument(
            "--no-profile",
            action="store_true",
            help="fail instead of profiling operators missing from the database",
        )


def _configure_gpu(parser: argparse.ArgumentParser) -> None:
    from infless.profiler.gpu_profile import DEFAULT_ROUNDS, DEFAULT_SHARES

    gpu = parser.add_argument_group("whole models on a GPU (--gpu)")
    gpu.add_argument(
        "--gpu", action="store_true", help="measure NAMES whole on a GPU at each share instead"
    )
    gpu.add_argument(
        "--shares",
        default=",".join(map(str, DEFAULT_SHARES)),
        help="GPU shares in percent (default: 10,20,30,50,100; only 100 without MPS)",
    )
    gpu.add_argument("--mps-pipe-dir", help="the pipe directory of the GPU's MPS daemon")
    gpu.add_argument("--uuid", help="the GPU (GPU-…; default: the first NVML reports)")
    gpu.add_argument(
        "--batch-sizes",
        default=",".join(map(str, DEFAULT_BATCHES)),
        help="comma-separated batch sizes (default: 1,2,4,8,16,32)",
    )
    gpu.add_argument(
        "--key",
        help="store the points under KEY, the function's image as the gateway names it (e.g. "
        "sha256:… for an uploaded package; default: the model's name); one NAME only",
    )
    gpu.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS, help="timed batches each")
    gpu.add_argument(
        "--dtype",
        choices=("fp32", "bf16"),
        default="fp32",
        help="the precision the function's GPU workers run at (the points do not record it; a "
        "bf16 variant's package is bf16 already)",
    )


def run(args: argparse.Namespace) -> int:
    from infless.profiler.gpu_profile import GpuProfileFailed
    from infless.progress import progress_for

    gpu = args.command == "profile" and args.gpu
    if not gpu:  # whole models on a GPU run in children: this process allocates nothing
        from infless.profiler.allocator import keep_freed_memory

        keep_freed_memory()  # the allocator state profiles and measurements share (see allocator)
    command = f"{args.command} --gpu" if gpu else args.command
    try:
        if args.command != "profile":
            return _run_predict(args)
        with progress_for(args.quiet) as progress:
            return _run_gpu_profile(args, progress) if gpu else _run_profile(args, progress)
    except InflessError as exc:
        print(f"infless {command}: {exc.message}", file=sys.stderr)
        return 2
    except (ValueError, LookupError, GpuProfileFailed) as exc:
        print(f"infless {command}: {exc}", file=sys.stderr)
        return 2


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _run_profile(args: argparse.Namespace, progress: Reporter) -> int:
    from infless.models.zoo import ZOO
    from infless.profiler.calibration import ensure_calibration
    from infless.profiler.database import ProfileDatabase
    from infless.profiler.operators import ProfilePlan
    from infless.profiler.prediction import default_db_path
    from infless.profiler.profiling import ProfileProgress
    from infless.profiler.service import ensure_profiles, graph_for, model_source

    if args.quick and not args.names:
        raise ValueError("--quick profiles what NAMES need: name at least one model or package")
    names = list(dict.fromkeys(args.names if args.quick else [*ZOO, *args.names]))
    plan = ProfilePlan.for_machine(args.max_threads, budget_s=args.budget_ms / 1000.0)
    db_path = args.db or default_db_path(args.state_dir)
    started = perf_s()
    graphs = []
    progress.begin("tracing models", total=len(names))
    for index, name in enumerate(names):
        progress.update(index, note=name)
        graph = graph_for(model_source(name), args.state_dir)
        progress.say(
            f"{name}: {len(graph.nodes)} nodes, {len(graph.signatures())} distinct operators "
            f"(traced by {graph.tracer})"
        )
        graphs.append(graph)
    with ProfileDatabase(db_path) as db:
        progress.begin("calibrating")
        ensure_calibration(db, force=args.recalibrate)
        progress.say(f"profiling into {db_path}: batches {plan.batches}, threads {plan.threads}")
        progress.begin("profiling operators")
        done = ensure_profiles(
            db,
            graphs,
            plan,
            ProfileProgress(log=progress.say, advance=progress.update),
            remeasure=args.remeasure,
        )
        ops, rows = db.counts()
    progress.close()
    _log(
        f"done in {perf_s() - started:.0f} s: measured {done.configs_measured} "
        f"configurations of {done.operators_done} operators, skipped "
        f"{done.configs_skipped} already profiled; the database holds {ops} operators, "
        f"{rows} profiles; multi-thread repetitions that ran under contention: "
        f"{done.reps_redone} redone, {done.reps_contended} kept (retries ran out)"
    )
    for failure in done.failures:
        _log(f"failed: {failure}")
    return 1 if done.failures else 0


def _run_gpu_profile(args: argparse.Namespace, progress: Reporter) -> int:
    from infless.cluster.gpus import discover_gpus
    from infless.models.build import ensure_package
    from infless.profiler.database import ProfileDatabase
    from infless.profiler.gpu_profile import profile_gpu
    from infless.profiler.prediction import default_db_path

    if not args.names:
        raise ValueError("--gpu measures NAMES: name at least one zoo model or package directory")
    if args.key and len(set(args.names)) > 1:
        raise ValueError(f"--key {args.key}: names the points of one model; NAMES has several")
    shares = [int(s) for s in str(args.shares).split(",") if s.strip()]
    batch_sizes = [int(b) for b in str(args.batch_sizes).split(",") if b.strip()]
    gpus = discover_gpus()
    uuid = args.uuid or (gpus.devices[0].uuid if gpus.devices else None)
    device = next((d for d in gpus.devices if d.uuid == uuid), None)
    if args.uuid and gpus.devices and device is None:
        known = ", ".join(f"{d.uuid} ({d.name})" for d in gpus.devices)
        raise ValueError(f"--uuid {args.uuid}: NVML reports no such GPU; this server has {known}")
    if not gpus.devices:
        _log(f"NVML lists no GPU ({gpus.reason}): the child's own CUDA device name is used")
    db_path = args.db or default_db_path(args.state_dir)
    started = perf_s()
    names = list(dict.fromkeys(args.names))
    with ProfileDatabase(db_path) as db:
        for index, name in enumerate(names):
            progress.begin(f"{name} on the GPU ({index + 1}/{len(names)})")
            package_dir = ensure_package(name, args.state_dir / "models")
            rows = profile_gpu(
                package_dir,
                shares,
                uuid,
                args.mps_pipe_dir,
                db,
                model_key=args.key,
                batch_sizes=batch_sizes,
                rounds=args.rounds,
                dtype=args.dtype,
                device_name=device.name if device is not None else None,
                log=progress.say,
            )
            measured = sorted({r.gpu_pct for r in rows})
            progress.say(f"{name}: {len(rows)} points at {measured} % stored in {db_path}")
    progress.close()
    _log(f"done in {perf_s() - started:.0f} s")
    return 0


def _run_predict(args: argparse.Namespace) -> int:
    from infless.profiler.database import ProfileDatabase
    from infless.profiler.operators import ProfilePlan
    from infless.profiler.prediction import default_db_path
    from infless.profiler.profiling import check_reference_kernel
    from infless.profiler.reference import reference_kernel
    from infless.profiler.service import (
        build_predictor,
        graph_for,
        measure_model_ms,
        measure_speed_now,
        model_source,
    )
    from infless.profiler.speed import SpeedIndex

    batches = [int(b) for b in str(args.batches).split(",") if b.strip()]
    plan = ProfilePlan.for_machine(args.max_threads, budget_s=args.budget_ms / 1000.0)
    source = model_source(args.name)
    graph = graph_for(source, args.state_dir)
    with ProfileDatabase(args.db or default_db_path(args.state_dir)) as db:
        predictor = build_predictor(
            db,
            [graph],
            plan=None if args.no_profile else plan,
            offset_pct=args.offset_pct,
            log_line=_log,
        )
        if args.speed_now:
            predictor.speed_now = measure_speed_now(db, plan.threads)
        if args.measure:
            check_reference_kernel(db)  # measurements are paired with the same kernel
    cells = []
    model = source.build_served() if args.measure else None
    kernel = reference_kernel() if model is not None else None
    for batch in batches:
        measured = (
            measure_model_ms(model, source, batch, plan.threads, reference=kernel)
            if model is not None
            else {}
        )
        # a measured cell is predicted for the machine's speed while it was measured
        speed = SpeedIndex.of({c: m.ref_ms for c, m in measured.items()}) if measured else None
        for cpus in plan.threads:
            raw = predictor.predict_raw_ms(source.key, batch, cpus, speed=speed)
            cell: dict[str, object] = {
                "batch": batch,
                "cpus": cpus,
                "gpu_pct": 0,
                "predicted_ms": raw * (1 + predictor.offset_pct / 100.0),
                "predicted_raw_ms": raw,
            }
            if cpus in measured:
                cell["measured_ms"] = measured[cpus].fast_ms
                cell["error_pct"] = 100.0 * (raw - measured[cpus].fast_ms) / measured[cpus].fast_ms
            cells.append(cell)
    if args.json:
        print(json.dumps({"model": source.key, "offset_pct": predictor.offset_pct, "cells": cells}))
        return 0
    _print_table(source.key, predictor.offset_pct, cells, plan.threads)
    return 0


def _print_table(
    key: str, offset_pct: float, cells: list[dict[str, object]], threads: tuple[int, ...]
) -> None:
    measured = any("measured_ms" in c for c in cells)
    print(f"{key}: predicted batch latency in ms (+{offset_pct:g}% offset), gpu_pct 0")
    if measured:
        print(
            "each cell: predicted / measured on the calling thread's CPU clock (latency on "
            "dedicated cores), with the error of the prediction without the offset"
        )
    width = 34 if measured else 12
    print("batch " + "".join(f"{'c=' + str(c):>{width}}" for c in threads))
    by_batch: dict[object, list[dict[str, object]]] = {}
    for cell in cells:
        by_batch.setdefault(cell["batch"], []).append(cell)
    for batch, row in by_batch.items():
        parts = []
        for cell in row:
            text = f"{cell['predicted_ms']:.3f}"
            if "measured_ms" in cell:
                text += f" / {cell['measured_ms']:.3f} ({cell['error_pct']:+.1f}%)"
            parts.append(f"{text:>{width}}")
        print(f"{batch!s:>5} " + "".join(parts))

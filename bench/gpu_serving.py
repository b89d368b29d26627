"""The GPU benchmark's profile and serving stages: GPU profiles measured under an MPS daemon
of the bench's own (and the predictor's error on a share left out), then the highest rate at
the SLO through a real gateway — one whole-GPU instance with dynamic batching (no MPS: the
Triton-style deployment) against infless's autoscaled non-uniform instances under MPS.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
from pathlib import Path
from typing import Any

from bench.harness import BENCH_MODELS, gateway
from bench.steps import Step, run_step
from infless.clock import RealClock
from infless.cluster.config import GpuConfig
from infless.cluster.gpus import inventory_for
from infless.cluster.mps import MpsControl
from infless.nodes.gpu_factory import gpu_root
from infless.profiler.database import GpuLatencyRow, ProfileDatabase
from infless.profiler.gpu_profile import profile_gpu
from infless.scaling.gpu_profiles import GpuProfilePredictor

PROFILE_SHARES = (10, 20, 50, 100)
HELD_OUT_SHARE = 30  # profiled too, but priced from the others: the predictor's error
BATCH_SIZES = (1, 2, 4, 8, 16, 32)
FORMATS = {"resnet-50": "raw", "bert-base": "msgpack"}  # BERT has two inputs
PROFILE_DB = "profiles.sqlite"


async def stage_profile(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """GPU profiles of the serving models under MPS, into `args.out/profiles.sqlite`."""
    cfg = GpuConfig(fake_devices=1 if args.fake else 0, mps="off" if args.fake else "auto")
    inventory = inventory_for(cfg)
    if not inventory.count:
        raise RuntimeError(f"no GPU: {inventory.reason}")
    device = inventory.devices[0]
    mps = MpsControl(cfg, inventory, gpu_root(root), RealClock())
    (sharing,) = [s for s in await mps.start() if s.uuid == device.uuid]
    figures: dict[str, Any] = {"device": device.name, "sharing": sharing.describe()}
    shares = sorted({*PROFILE_SHARES, HELD_OUT_SHARE}) if sharing.pipe_dir else [100]
    db_path = args.out / PROFILE_DB
    try:
        with ProfileDatabase(db_path) as db:
            for model in args.models:
                rows = await asyncio.to_thread(
                    profile_gpu,
                    BENCH_MODELS / model,
                    shares,
                    device.uuid,
                    sharing.pipe_dir,
                    db,
                    batch_sizes=BATCH_SIZES,
                    rounds=args.profile_rounds,
                    log=lambda line: print(f"  {line}", flush=True),
                )
                figures[model] = {
                    "points": len(rows),
                    "ms": {f"b{r.batch_size}/g{r.gpu_pct}": round(r.exec_ms, 3) for r in rows},
                    "predictor": predictor_error(rows, device.name),
                }
                print(
                    f"{model}: {len(rows)} points; predictor error at {HELD_OUT_SHARE} % "
                    f"{figures[model]['predictor']}"
                )
    finally:
        await mps.stop()
    figures["database"] = str(db_path)
    return figures


def predictor_error(rows: list[GpuLatencyRow], device_name: str) -> dict[str, Any]:
    """The predictor priced from every share but `HELD_OUT_SHARE` against what was measured
    there: relative errors per batch size, their mean and worst."""
    known = [r for r in rows if r.gpu_pct != HELD_OUT_SHARE]
    held = [r for r in rows if r.gpu_pct == HELD_OUT_SHARE]
    if not known or not held:
        return {"error": f"no points at {HELD_OUT_SHARE} % or around it"}
    predictor = GpuProfilePredictor(known, [device_name])
    errors: dict[str, float | str] = {}
    for row in held:
        try:
            predicted = predictor.predict_latency_ms(
                row.model_key, row.batch_size, 1, HELD_OUT_SHARE
            )
        except LookupError as exc:
            errors[f"b{row.batch_size}"] = str(exc)
            continue
        errors[f"b{row.batch_size}"] = round((predicted - row.exec_ms) / row.exec_ms, 4)
    values = [abs(v) for v in errors.values() if not isinstance(v, str)]
    return {
        "share_pct": HELD_OUT_SHARE,
        "relative_error_by_batch": errors,
        "mean_abs": round(statistics.mean(values), 4) if values else None,
        "max_abs": round(max(values), 4) if values else None,
    }


def whole_gpu_capacity_rps(model: str, slo_ms: float, db_path: Path) -> float | None:
    """What one whole-GPU instance serves at its best batch within half the SLO (INFless's
    feasibility), from the profiles: where the rate ladder is centred."""
    if not db_path.is_file():
        return None
    with ProfileDatabase(db_path) as db:
        rows = [r for r in db.gpu_latency(model_keys=[model]) if r.gpu_pct == 100]
    fits = [r for r in rows if r.exec_ms <= slo_ms / 2]
    return max((r.batch_size * 1000.0 / r.exec_ms for r in fits), default=None)


def _configs(deployment: str, model: str, args: argparse.Namespace) -> tuple[str, str]:
    """The gateway's config sections and the function, per deployment."""
    fake = "fake_devices = 1\nfake_memory_mib = 16384\n" if args.fake else ""
    if deployment == "whole-gpu":  # one instance owning the GPU, batching dynamically
        extra = f'[gpu]\n{fake}mps = "off"\n[scaling]\npolicy = "none"\n'
        share = "gpu_pct = 100\ninstances = 1\n"
    else:  # Algorithm 1 over GPU shares under MPS, from the GPU profiles
        mps = '"off"' if args.fake else '"auto"'
        extra = (
            f'[gpu]\n{fake}mps = {mps}\n[scaling]\npolicy = "infless"\n'
            "gpu_options_pct = [10, 20, 30, 50, 100]\ncpu_options = [1]\n"
        )
        share = "instances = 1\n"
    extra += "[coldstart]\nscale_to_zero = false\n"
    function = (
        f'[[functions]]\nname = "{model}"\nimage = "{model}"\nslo_ms = {args.slo_ms}\n'
        f"max_batch = {args.max_batch}\n{share}"
    )
    return extra, function


def run_deployment(
    deployment: str, model: str, rates: list[float], args: argparse.Namespace, root: Path
) -> dict[str, Any]:
    work = root / f"{model}-{deployment}"
    state = work / "state"
    state.mkdir(parents=True, exist_ok=True)
    profiles = args.out / PROFILE_DB
    if profiles.is_file():  # the planner prices GPU shares from them
        shutil.copy(profiles, state / PROFILE_DB)
    extra, function = _configs(deployment, model, args)
    steps: list[Step] = []
    fmt = FORMATS.get(model, "json")
    with gateway(work, function, extra) as gw:
        gw.wait_ready(model)
        warm = argparse.Namespace(**{**vars(args), "step_s": args.warmup_s})
        run_step(gw, model, args.slo_ms, rates[0] / 2, fmt, warm, work / "warm")
        for rate in rates:
            step = run_step(gw, model, args.slo_ms, rate, fmt, args, work / f"r{int(rate)}")
            steps.append(step)
            clean = step.kept_up and step.p99_ms <= args.slo_ms and not step.rejected_429
            clean = clean and not step.other_errors
            print(
                f"  {deployment:>9} {model}: offered {step.offered_rps:7.0f} achieved "
                f"{step.achieved_rps:7.0f} p99 {step.p99_ms:6.1f} ms 429 {step.rejected_429} "
                f"errors {step.other_errors} {' '.join(step.instances)}"
                + ("" if clean else "  (fails)"),
                flush=True,
            )
            if not clean:
                break
        instances = gw.get("/system/instances")
    passing = [s for s in steps if s.kept_up and s.p99_ms <= args.slo_ms]
    passing = [s for s in passing if not s.rejected_429 and not s.other_errors]
    return {
        "max_rps_at_slo": max((s.offered_rps for s in passing), default=0.0),
        "steps": [
            {
                "offered": round(s.offered_rps),
                "achieved": round(s.achieved_rps),
                "p99_ms": round(s.p99_ms, 1),
                "rejected_429": s.rejected_429,
                "errors": s.other_errors,
                "instances": s.instances,
            }
            for s in steps
        ],
        "instances_at_end": [
            {"batch": i["batchSize"], "cpus": i["cpus"], "gpu_pct": i["gpuPct"]}
            for i in instances
            if i["function"] == model
        ],
    }


async def stage_throughput(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    figures: dict[str, Any] = {"slo_ms": args.slo_ms, "step_s": args.step_s}
    for model in args.models:
        capacity = whole_gpu_capacity_rps(model, args.slo_ms, args.out / PROFILE_DB)
        base = capacity or args.fallback_rps
        rates = [round(base * f) for f in args.ladder]
        result: dict[str, Any] = {"whole_gpu_capacity_rps": capacity, "rates": rates}
        for deployment in ("whole-gpu", "infless"):
            result[deployment] = await asyncio.to_thread(
                run_deployment, deployment, model, rates, args, root
            )
        whole = result["whole-gpu"]["max_rps_at_slo"]
        ours = result["infless"]["max_rps_at_slo"]
        result["ratio_infless_over_whole_gpu"] = round(ours / whole, 2) if whole else None
        print(
            f"{model}: max rate at SLO, whole GPU {whole:.0f} req/s, infless {ours:.0f} "
            f"req/s (ratio {result['ratio_infless_over_whole_gpu']}, goal >= 1.5)"
        )
        figures[model] = result
    figures["goal_ratio"] = 1.5
    return figures

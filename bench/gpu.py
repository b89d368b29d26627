"""infless on a GPU: start times, device memory, GPU profiles and the predictor's error, and
throughput at the SLO against one whole-GPU instance — one run, device and driver named.

    python -m bench.gpu [--out DIR] [--stages device,start,memory,profile,throughput]
        [--fake] [--quick]

Stages (each reports on its own; one that fails says why and the others still run):

- `device`: the GPU, its driver, torch and CUDA as the workers see them.
- `start`: instance start to first answer (ResNet-50, batch 8, 30 % of the GPU under MPS):
  a fresh process (torch, CUDA context, libraries, the model) vs a warm standby worker with
  the weights already in the GPU tier vs an idle GPU worker of another model (ResNet-18)
  taking ResNet-50 (the Optimus path: its process and kernels warm). p50 of `--starts`
  each; goal ≤ 100 ms p50 from standby + tier.
- `memory`: device memory for 1 and 8 instances of ResNet-50 (10 % each) with and without
  the GPU tier: the model memory (tier copies + each instance's own allocations) and all the
  device holds (NVML, CUDA contexts included); goal: 8 instances ≤ 1.3× one, with the tier.
- `profile`: the GPU profiles the planner prices shares with (`infless.profiler.gpu_profile`:
  one process per share under MPS), and the predictor's error on a share left out of them.
- `throughput`: the highest rate at p99 ≤ SLO (50 ms) with no error of any kind, open-loop
  Poisson steps, for ResNet-50 and BERT-base: infless's non-uniform instances under MPS
  (autoscaled from the GPU profiles) against one whole-GPU instance with dynamic batching
  (the Triton-style deployment, no MPS); goal ≥ 1.5×.

`--fake` runs every stage on fake GPUs (the CPU computes; no MPS): it checks the bench, its
figures mean nothing. Prints a table per stage and ends with one line of JSON (also written to
`OUT/bench-gpu.json` after each stage).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.gpu_serving import stage_profile, stage_throughput
from bench.gpu_stack import (
    boot_and_answer,
    device_memory_used_bytes,
    gpu_stack,
    model_memory_bytes,
    order,
    retire,
    wait_standby,
)
from bench.harness import BENCH_MODELS, build_models
from infless.cluster.config import GpuConfig
from infless.cluster.gpus import inventory_for

MIB = 1 << 20


def stage_device(args: argparse.Namespace) -> dict[str, Any]:
    inventory = inventory_for(GpuConfig(fake_devices=1 if args.fake else 0))
    found: dict[str, Any] = {"source": inventory.source, "reason": inventory.reason}
    found["devices"] = [
        {
            "index": d.index,
            "name": d.name,
            "memory_mib": d.memory_total_bytes // MIB,
            "mig": d.mig_enabled,
            "compute_mode": d.compute_mode,
        }
        for d in inventory.devices
    ]
    found["driver"] = _driver_version()
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, torch; print(sys.version.split()[0], "
            "torch.__version__, torch.version.cuda, torch.cuda.is_available())",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    python, torch, cuda, available = (probe.stdout.split() + ["?"] * 4)[:4]
    found |= {"python": python, "torch": torch, "cuda": cuda, "cuda_available": available}
    for device in found["devices"]:
        print(f"GPU {device['index']}: {device['name']}, {device['memory_mib']} MiB")
    print(f"driver {found['driver']}, python {python}, torch {torch}, CUDA {cuda}")
    return found


def _driver_version() -> str:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
    except Exception as exc:  # no driver: say so
        return f"unknown ({type(exc).__name__})"
    return version.decode() if isinstance(version, bytes) else str(version)


def _p50(values: list[float]) -> float:
    return round(statistics.median(values), 1) if values else 0.0


async def stage_start(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    r50, r18 = BENCH_MODELS / "resnet-50", BENCH_MODELS / "resnet-18"
    share, batch = 30, 8
    fresh: list[float] = []
    async with gpu_stack(root / "fresh", fake=args.fake, standby=0) as stack:
        for k in range(args.fresh_starts):
            boot = order(stack, r50, k, batch_size=batch, gpu_pct=share)
            answer = await boot_and_answer(stack, boot)
            fresh.append(answer.total_ms)
            await retire(stack, boot, answer.booted.handle, keep=False)
    standby: list[float] = []
    reused: list[float] = []
    breakdown: dict[str, float] = {}
    async with gpu_stack(root / "warm", fake=args.fake, standby=1) as stack:
        number = iter(range(1000))
        await wait_standby(stack, share)
        # one instance keeps ResNet-50's device copy in the tier (another instance of it)
        keeper = order(stack, r50, next(number), batch_size=batch, gpu_pct=share)
        kept = await boot_and_answer(stack, keeper)
        for _ in range(args.starts):
            await wait_standby(stack, share)
            boot = order(stack, r50, next(number), batch_size=batch, gpu_pct=share)
            answer = await boot_and_answer(stack, boot)
            standby.append(answer.total_ms)
            start = answer.booted.start
            breakdown = {
                "build_ms": start.build_ms,
                "attach_ms": start.attach_ms,
                "warmup_ms": start.warmup_ms,
                "first_answer_ms": answer.first_ms,
            }
            await retire(stack, boot, answer.booted.handle, keep=False)
        for _ in range(args.starts):  # an idle worker of ResNet-18 becomes ResNet-50
            other = order(stack, r18, next(number), batch_size=batch, gpu_pct=share)
            idle = await boot_and_answer(stack, other)
            await retire(stack, other, idle.booted.handle, keep=True)
            boot = order(stack, r50, next(number), batch_size=batch, gpu_pct=share)
            answer = await boot_and_answer(stack, boot)
            if answer.path == "reused":
                reused.append(answer.total_ms)
            await retire(stack, boot, answer.booted.handle, keep=False)
        await retire(stack, keeper, kept.booted.handle, keep=False)
    figures = {
        "model": "resnet-50",
        "batch_size": batch,
        "gpu_pct": share,
        "fresh_ms_p50": _p50(fresh),
        "standby_tier_ms_p50": _p50(standby),
        "idle_worker_ms_p50": _p50(reused),
        "runs": {"fresh": fresh, "standby_tier": standby, "idle_worker": reused},
        "standby_breakdown_ms": breakdown,
        "goal_standby_tier_ms_p50": 100.0,
    }
    print(
        f"start to first answer, p50: fresh {figures['fresh_ms_p50']} ms, standby + tier "
        f"{figures['standby_tier_ms_p50']} ms, idle worker of another model "
        f"{figures['idle_worker_ms_p50']} ms (goal <= 100 ms from standby + tier)"
    )
    return figures


async def stage_memory(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    r50 = BENCH_MODELS / "resnet-50"
    figures: dict[str, Any] = {"model": "resnet-50", "gpu_pct": 10, "batch_size": 8}
    for tier in (True, False):
        async with gpu_stack(
            root / f"memory-{tier}", fake=args.fake, standby=0, tier=tier
        ) as stack:
            before = device_memory_used_bytes(args.fake)
            boots = [order(stack, r50, k, batch_size=8, gpu_pct=10) for k in range(8)]
            first = await boot_and_answer(stack, boots[0])
            handles = [first.booted.handle]
            one = await model_memory_bytes(stack, handles)
            device_one = device_memory_used_bytes(args.fake) - before
            answers = await asyncio.gather(*(boot_and_answer(stack, b) for b in boots[1:]))
            handles += [a.booted.handle for a in answers]
            eight = await model_memory_bytes(stack, handles)
            device_eight = device_memory_used_bytes(args.fake) - before
            for boot, handle in zip(boots, handles, strict=True):
                await retire(stack, boot, handle, keep=False)
        key = "tier" if tier else "no_tier"
        figures[key] = {
            "model_mib_1": round(one / MIB, 1),
            "model_mib_8": round(eight / MIB, 1),
            "model_ratio_8_to_1": round(eight / max(1, one), 2),
            "device_mib_1": round(device_one / MIB, 1),
            "device_mib_8": round(device_eight / MIB, 1),
            "device_ratio_8_to_1": round(device_eight / max(1, device_one), 2),
        }
        print(
            f"memory {key}: model {figures[key]['model_mib_1']} -> "
            f"{figures[key]['model_mib_8']} MiB ({figures[key]['model_ratio_8_to_1']}x), "
            f"device {figures[key]['device_mib_1']} -> {figures[key]['device_mib_8']} MiB "
            f"({figures[key]['device_ratio_8_to_1']}x)"
        )
    figures["goal_model_ratio_8_to_1_with_tier"] = 1.3
    return figures


STAGES: dict[str, Callable[[argparse.Namespace, Path], Any]] = {
    "start": stage_start,
    "memory": stage_memory,
    "profile": stage_profile,
    "throughput": stage_throughput,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument("--stages", default="device,start,memory,profile,throughput")
    parser.add_argument("--fake", action="store_true", help="fake GPUs: checks the bench only")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions and steps")
    parser.add_argument("--starts", type=int, default=5)
    parser.add_argument("--fresh-starts", type=int, default=2)
    parser.add_argument("--models", default="resnet-50,bert-base", help="profiled and served")
    parser.add_argument("--slo-ms", type=float, default=50.0)
    parser.add_argument("--max-batch", type=int, default=32)
    parser.add_argument("--step-s", type=float, default=6.0)
    parser.add_argument("--warmup-s", type=float, default=3.0)
    parser.add_argument("--max-requests", type=int, default=100_000, help="per step")
    parser.add_argument("--profile-rounds", type=int, default=10)
    parser.add_argument(
        "--ladder",
        default="0.5,0.75,1,1.25,1.5,1.75,2,2.5,3",
        help="step rates as multiples of one whole-GPU instance's profiled capacity",
    )
    parser.add_argument(
        "--fallback-rps", type=float, default=50.0, help="the ladder's unit without profiles"
    )
    args = parser.parse_args(argv)
    args.models = args.models.split(",")
    args.ladder = [float(f) for f in args.ladder.split(",")]
    if args.quick:
        args.starts, args.fresh_starts, args.step_s, args.profile_rounds = 3, 1, 4.0, 5
        args.warmup_s = 2.0
    args.out.mkdir(parents=True, exist_ok=True)
    build_models("resnet-50", "resnet-18", "bert-base")
    figures: dict[str, Any] = {"bench": "gpu", "fake": args.fake}
    wanted = args.stages.split(",")
    failed = 0
    with tempfile.TemporaryDirectory(prefix="infless-gpu-") as scratch:
        for name in wanted:
            print(f"== {name}", flush=True)
            try:
                if name == "device":
                    figures["device"] = stage_device(args)
                elif name in STAGES:
                    figures[name] = asyncio.run(STAGES[name](args, Path(scratch) / name))
                else:
                    figures[name] = {
                        "error": f"no stage {name!r}; stages: device, {', '.join(STAGES)}"
                    }
                    failed += 1
            except Exception as exc:  # a stage that fails says why; the others still run
                traceback.print_exc()
                figures[name] = {"error": f"{type(exc).__name__}: {exc}"}
                failed += 1
            (args.out / "bench-gpu.json").write_text(json.dumps(figures, indent=1))
    print(json.dumps(figures))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

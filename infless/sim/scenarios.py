"""Ready-made simulation scenarios and a policy comparison (`python -m infless.sim`).

The mixes follow the paper's evaluation: a Q&A robot (textcnn-69, lstm-2365, dssm-2365; SLO
50 ms) and a vision mix (SLO 200 ms). Their latencies are synthetic analytic models, shaped
like measured CPU tables (batching amortises, cores scale sub-linearly), not measurements:
for real numbers, hand `compare` a `TablePredictor` built from this machine's profiles.
The planner sees the truth through a 10 % safety offset, as §3.3 prescribes.

`--scenario modelless-step` runs model-less serving instead (`sim.modelless`): one
application of a model with three variants (fp32: exact and slow; bf16; int8: fastest,
least exact), profiled as the variant generator writes them, under a load stepping low →
high → low; and, for comparison, the same arrivals on the fp32 variant alone and on the
fastest alone, replicated by the same autoscaler.
Prints a table and, last, one line of JSON; the simulation itself does no I/O.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence

import msgspec

from infless.modelless.profiles import GenerationResult, LatencyPoint, VariantProfile
from infless.scaling.config import POLICY_NAMES, ScalingConfig
from infless.scaling.predictors import AnalyticModel, AnalyticPredictor, ScaledPredictor
from infless.sim.engine import SimApp, SimConfig, SimFunction, simulate
from infless.sim.results import AppResult, SimResult
from infless.sim.workload import RateSchedule, bursty

TRUTH = AnalyticPredictor(
    {
        "textcnn-69": AnalyticModel(fixed_ms=1.5, per_item_ms=4.0),
        "lstm-2365": AnalyticModel(fixed_ms=3.0, per_item_ms=9.0),
        "dssm-2365": AnalyticModel(fixed_ms=2.0, per_item_ms=6.0),
        "resnet-50": AnalyticModel(fixed_ms=10.0, per_item_ms=60.0),
        "mobilenet": AnalyticModel(fixed_ms=4.0, per_item_ms=20.0),
    }
)


def qa_mix(duration_s: float, scale: float = 1.0) -> tuple[SimFunction, ...]:
    return tuple(
        SimFunction(
            name, name, 50.0, 32, bursty(base * scale, peak * scale, duration_s, first_burst_s=t)
        )
        for name, base, peak, t in (
            ("textcnn-69", 200.0, 1200.0, 10.0),
            ("lstm-2365", 100.0, 500.0, 15.0),
            ("dssm-2365", 150.0, 700.0, 20.0),
        )
    )


def vision_mix(duration_s: float, scale: float = 1.0) -> tuple[SimFunction, ...]:
    return tuple(
        SimFunction(
            name, name, 200.0, 16, bursty(base * scale, peak * scale, duration_s, first_burst_s=t)
        )
        for name, base, peak, t in (
            ("resnet-50", 40.0, 250.0, 10.0),
            ("mobilenet", 100.0, 600.0, 20.0),
        )
    )


def compare(
    functions: Sequence[SimFunction],
    cfg: SimConfig,
    policies: Sequence[str] = POLICY_NAMES,
    truth: AnalyticPredictor = TRUTH,
    offset: float = 1.1,
    scaling: ScalingConfig | None = None,
) -> dict[str, SimResult]:
    """Run the same load under each policy; the planner predicts truth × `offset`."""
    base = scaling or ScalingConfig()
    planner = ScaledPredictor(truth, offset)
    results: dict[str, SimResult] = {}
    for policy in policies:
        settings = msgspec.structs.replace(base, policy=policy)
        results[policy] = simulate(functions, truth, cfg, settings, planner)
    return results


def format_table(results: dict[str, SimResult]) -> str:
    header = (
        f"{'policy':16s} {'violations':>10s} {'p99 ms':>8s} {'cores':>7s} "
        f"{'cores/100rps':>12s} {'batch':>6s} {'starts':>6s}"
    )
    lines = [header, "-" * len(header)]
    for name, r in results.items():
        lines.append(
            f"{name:16s} {100 * r.violation_rate:9.2f}% {r.p99_ms:8.1f} {r.mean_cores:7.1f} "
            f"{r.cores_per_100_rps:12.2f} {r.mean_batch:6.2f} {r.instance_starts:6d}"
        )
    return "\n".join(lines)


# -- model-less serving ----------------------------------------------------------------------
STEP_MODEL = "minilm"
STEP_SLO_MS = 100.0
# t_exec (ms) at 1 core per batch size 1, 2, 4, 8, 16; 2 cores take 0.6 of it
_STEP_VARIANTS = (
    # name, accuracy (top-1 agreement with fp32), load_ms, peak MiB, ms at b = 1 ... 16
    ("fp32", 1.0, 900.0, 310, (8.0, 13.0, 22.0, 40.0, 76.0)),
    ("bf16", 0.996, 1100.0, 260, (6.0, 9.5, 16.0, 29.0, 55.0)),
    ("int8", 0.981, 1400.0, 240, (4.0, 5.5, 8.5, 14.5, 27.0)),
)


def _ready_variant(
    model: str, name: str, accuracy: float, load_ms: float, mib: int, times: Sequence[float]
) -> VariantProfile:
    latency = [
        LatencyPoint(b, c, round(ms * (1.0 if c == 1 else 0.6), 3))
        for b, ms in zip((1, 2, 4, 8, 16), times, strict=True)
        for c in (1, 2)
    ]
    return VariantProfile(
        model=model,
        name=name,
        transform=name,
        status="ready",
        package_dir=f"state/variants/{model}/{name}",
        accuracy=accuracy,
        metric="top1-agreement",
        latency=latency,
        load_ms=load_ms,
        peak_memory_bytes=mib << 20,
    )


def step_profiles(model: str = STEP_MODEL) -> GenerationResult:
    """Synthetic variants of a small text model, as `python -m infless.modelless.generate`
    prints them (batch sizes 1-16, 1 and 2 cores): three ready, one not applicable, one
    failed."""
    variants = [_ready_variant(model, *variant) for variant in _STEP_VARIANTS]
    variants += [
        VariantProfile(
            model,
            "channels-last",
            "channels-last",
            "not-applicable",
            error="no 4-d input: channels-last changes nothing",
        ),
        VariantProfile(model, "compile", "compile", "failed", error="timed out after 600 s"),
    ]
    return GenerationResult(model, "top1-agreement", variants)


def step_load(low_rps: float, high_rps: float, up_s: float, down_s: float) -> RateSchedule:
    """`low_rps`, a step to `high_rps` at `up_s` (1-s ramp) and back at `down_s`."""
    return RateSchedule(
        (
            (0.0, low_rps),
            (up_s, low_rps),
            (up_s + 1.0, high_rps),
            (down_s, high_rps),
            (down_s + 1.0, low_rps),
        )
    )


def modelless_step(
    cfg: SimConfig,
    low_rps: float = 60.0,
    high_rps: float = 450.0,
    up_s: float = 20.0,
    down_s: float = 50.0,
) -> dict[str, AppResult]:
    """One model-less application, then the same arrivals (same seed: the application's
    stream is the run's first) on the fp32 variant alone and on the fastest alone."""
    profiles = tuple(step_profiles().variants)
    ready = [p for p in profiles if p.status == "ready"]
    fastest = min(ready, key=lambda p: p.latency_ms(1, 1) or float("inf"))
    load = step_load(low_rps, high_rps, up_s, down_s)
    runs = {
        "modelless": profiles,
        "fp32 only": tuple(p for p in ready if p.name == "fp32"),
        f"{fastest.name} only": (fastest,),
    }
    results: dict[str, AppResult] = {}
    for label, variants in runs.items():
        app = SimApp(STEP_MODEL, STEP_SLO_MS, 16, variants, load)
        result = simulate((), AnalyticPredictor({}), cfg, ScalingConfig(), apps=[app])
        results[label] = result.apps[STEP_MODEL]
    return results


def format_apps(results: dict[str, AppResult]) -> str:
    header = (
        f"{'run':12s} {'requests':>8s} {'violations':>10s} {'p99 ms':>7s} {'accuracy':>8s} "
        f"{'core-s':>7s} {'switches':>8s}  requests per variant"
    )
    lines = [header, "-" * len(header)]
    for name, r in results.items():
        mix = ", ".join(f"{v} {n}" for v, n in sorted(r.by_variant.items()))
        lines.append(
            f"{name:12s} {r.requests:8d} {100 * r.violation_rate:9.2f}% {r.p99_ms:7.1f} "
            f"{r.mean_accuracy:8.4f} {r.core_seconds:7.1f} {r.switches:8d}  {mix}"
        )
    return "\n".join(lines)


def run_modelless_step(cfg: SimConfig) -> int:
    results = modelless_step(cfg)
    print(format_apps(results))
    moves = results["modelless"].moves
    print("modelless moves:", ", ".join(f"{t:.1f} s {m} to {v}" for t, m, v in moves) or "none")
    print(
        json.dumps(
            {
                "scenario": "modelless-step",
                "violation_rate": {k: r.violation_rate for k, r in results.items()},
                "core_seconds": {k: r.core_seconds for k, r in results.items()},
                "mean_accuracy": {k: r.mean_accuracy for k, r in results.items()},
                "switches": {k: r.switches for k, r in results.items()},
            }
        )
    )
    return 0


SCENARIOS: dict[str, Callable[[SimConfig], int]] = {"modelless-step": run_modelless_step}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infless.sim", description=__doc__)
    parser.add_argument(
        "--scenario", choices=sorted(SCENARIOS), help="a named scenario instead of --mix"
    )
    parser.add_argument("--mix", choices=["qa", "vision"], default="qa")
    parser.add_argument("--servers", type=int, default=8)
    parser.add_argument("--cpus-per-server", type=int, default=16)
    parser.add_argument("--duration-s", type=float, default=90.0)
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every rate")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--policies", nargs="+", default=list(POLICY_NAMES), choices=POLICY_NAMES)
    args = parser.parse_args(argv)
    mix = qa_mix if args.mix == "qa" else vision_mix
    cfg = SimConfig(
        servers=args.servers,
        cpus_per_server=args.cpus_per_server,
        duration_s=args.duration_s,
        exec_jitter=0.05,
        seed=args.seed,
    )
    if args.scenario is not None:
        return SCENARIOS[args.scenario](cfg)
    results = compare(mix(args.duration_s, args.scale), cfg, args.policies)
    print(format_table(results))
    base = results.get("infless")
    ratios = {
        name: (
            r.cores_per_100_rps / base.cores_per_100_rps
            if base and base.cores_per_100_rps
            else None
        )
        for name, r in results.items()
    }
    print(
        "cores per 100 RPS relative to infless:", {k: round(v, 2) for k, v in ratios.items() if v}
    )
    print(
        json.dumps(
            {
                "mix": args.mix,
                "violation_rate": {k: r.violation_rate for k, r in results.items()},
                "cores_per_100_rps": {k: r.cores_per_100_rps for k, r in results.items()},
            }
        )
    )
    return 0

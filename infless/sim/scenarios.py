"""Ready-made simulation scenarios and a policy comparison (`python -m infless.sim`).

The mixes follow the paper's evaluation: a Q&A robot (textcnn-69, lstm-2365, dssm-2365; SLO
50 ms) and a vision mix (SLO 200 ms). Their latencies are synthetic analytic models, shaped
like measured CPU tables (batching amortises, cores scale sub-linearly), not measurements:
for real numbers, hand `compare` a `TablePredictor` built from this machine's profiles.
The planner sees the truth through a 10 % safety offset, as §3.3 prescribes.
Prints a table and, last, one line of JSON; the simulation itself does no I/O.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

import msgspec

from infless.scaling.config import POLICY_NAMES, ScalingConfig
from infless.scaling.predictors import AnalyticModel, AnalyticPredictor, ScaledPredictor
from infless.sim.engine import SimConfig, SimFunction, simulate
from infless.sim.model import SimResult
from infless.sim.workload import bursty

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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infless.sim", description=__doc__)
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

"""Does infless hold the SLO on this machine today? Every rate as a fraction of what the
machine can do without infless, measured in the same run.

As a user would measure it: a fresh gateway with the shipped `config.toml` settings and one
function, and the load generator (`loadgen synthetic`, a separate process on the same cores)
sending one sample per request, open loop. Functions (`--functions`): `text`, the small
TextCNN (`textcnn-64`), SLO 50 ms; `vision`, ResNet-20 on 3×32×32 (`resnet-20-cifar`), SLO
200 ms; JSON bodies and/or raw tensor bytes (`--formats`).

1. **The in-process limit** (`bench.slo_limit`): the model's forward in this process, every
   batch size, 1 thread and all cores; the limit is the best items/s with all cores. Every
   rate below is also given as a fraction of it.
2. **Ladder**: Poisson steps of `--step-s` at rising fractions of the limit (`--fractions`),
   after a warm-up step; a step passes when it kept up (≥ 97 % of offered), its p99 is
   within the SLO and **nothing failed — a 429 fails the step**. The figure: the highest
   passing fraction (the ladder stops at the first failure). Per step, the server's CPU per
   request (gateway + workers) against the model's own in-process CPU per item at the batch
   sizes the answers came in with the instances' threads.
3. **Step from idle** (`--idle-step`): a fresh gateway, idle, then Poisson at half the
   ladder's maximum: refusals after the first second (goal: none) and p99.
4. **Slow ramp** (`--ramp-s`): from 5 % of the limit to the ladder's maximum: any error.
5. **Overload** (`--overload`): ten times the ladder's maximum (capped by
   `--overload-cap-rps`): the admitted requests' p99 and the goodput (answers within the SLO
   per second) as a fraction of the ladder's maximum (goal ≥ 0.8); every refusal a 429 with
   Retry-After, nothing lost.

    .venv/bin/python -m bench.slo [--functions text vision] [--formats json raw]
        [--step-s 10] [--fractions 0.1,0.2,...] [--idle-step] [--ramp-s 40] [--overload]

Prints a table per run and ends with one JSON line. Everything targets 127.0.0.1, bounded in
requests (`--max-requests` per step) and time.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench.harness import build_models, gateway
from bench.slo_limit import ModelCosts, measure
from bench.steps import (
    HEADER,
    Step,
    config_sections,
    rate_list,
    records,
    row,
    run_load,
    run_step,
    shape_args,
)

FUNCTIONS = {
    "text": ("textcnn-64", 50.0),
    "vision": ("resnet-20-cifar", 200.0),
}
DEFAULT_FRACTIONS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def functions_toml(kind: str, args: argparse.Namespace) -> str:
    image, slo_ms = FUNCTIONS[kind]
    return (
        f'[[functions]]\nname = "{kind}"\nimage = "{image}"\nslo_ms = {slo_ms}\n'
        f"max_batch = {args.max_batch}\ninstances = 1\n"
    )


def model_cpu_us(step: Step, costs: ModelCosts, instances: list[dict[str, Any]]) -> float:
    """The model's own CPU per request in this step: the in-process cost per item at each
    answer's batch size, with the threads of the instances that served (their mean)."""
    served = [i for i in instances if i["served"]]
    threads = round(sum(i["cpus"] for i in served) / len(served)) if served else 1
    answers = sum(step.batch_sizes.values())
    if not answers:
        return 0.0
    total = sum(n * costs.cost_us(b, threads) for b, n in step.batch_sizes.items())
    return total / answers


def ladder(
    kind: str, fmt: str, costs: ModelCosts, args: argparse.Namespace, work: Path
) -> dict[str, Any]:
    _, slo_ms = FUNCTIONS[kind]
    limit = costs.limit_items_per_s
    steps: list[dict[str, Any]] = []
    passing = 0.0
    with gateway(work / f"{kind}-{fmt}", functions_toml(kind, args), config_sections()) as gw:
        gw.wait_ready(kind)
        warm = argparse.Namespace(**{**vars(args), "step_s": args.warmup_s})
        run_step(gw, kind, slo_ms, limit * args.fractions[0], fmt, warm, work / f"{kind}-w")
        for fraction in args.fractions:
            out = work / f"{kind}-{fmt}-{fraction}"
            step = run_step(gw, kind, slo_ms, limit * fraction, fmt, args, out)
            model = model_cpu_us(step, costs, gw.get("/system/instances"))
            ratio = step.server_cpu_us_per_request / model if model else 0.0
            print(
                f"{row(step, slo_ms)}  {fraction:.2f} of the limit, server CPU "
                f"{ratio:.2f}x the model's",
                flush=True,
            )
            steps.append(
                {
                    **step.describe(),
                    "fraction": fraction,
                    "model_cpu_us_per_request": round(model, 1),
                    "server_cpu_over_model": round(ratio, 2),
                }
            )
            if not step.passed:
                break
            passing = fraction
    return {
        "max_fraction_at_slo": passing,
        "max_rps_at_slo": round(passing * limit),
        "steps": steps,
    }


def step_from_idle(
    kind: str, fmt: str, rate: float, args: argparse.Namespace, work: Path
) -> dict[str, Any]:
    """A fresh gateway, idle, then `rate` at once: refusals in the first second and after."""
    _, slo_ms = FUNCTIONS[kind]
    out = work / f"{kind}-{fmt}-idle-step"
    with gateway(work / f"{kind}-{fmt}-idle", functions_toml(kind, args), config_sections()) as gw:
        gw.wait_ready(kind)
        time.sleep(args.idle_s)
        step = run_step(gw, kind, slo_ms, rate, fmt, args, out)
    rows = records(out)
    late = [r for r in rows if float(r["sent_s"]) >= 1.0]
    refused_after = sum(1 for r in late if r["status"] != "200")
    latencies = sorted(float(r["latency_ms"]) for r in late if r["status"] == "200")
    p99 = latencies[int(0.99 * (len(latencies) - 1))] if latencies else 0.0
    print(
        f"step from idle to {rate:.0f} req/s: {step.errors} failed in all, "
        f"{refused_after} after the first second; p99 after it {p99:.1f} ms "
        f"(SLO {slo_ms:g})"
    )
    return {
        **step.describe(),
        "rate_rps": round(rate),
        "failed_after_first_s": refused_after,
        "p99_after_first_s_ms": round(p99, 1),
    }


def ramp(
    kind: str, fmt: str, start: float, end: float, args: argparse.Namespace, work: Path
) -> dict[str, Any]:
    _, slo_ms = FUNCTIONS[kind]
    with gateway(work / f"{kind}-{fmt}-ramp", functions_toml(kind, args), config_sections()) as gw:
        gw.wait_ready(kind)
        shape = shape_args(end, args.ramp_s, ramp_from_rps=start)
        step = run_load(gw, kind, slo_ms, shape, fmt, args, work / f"{kind}-{fmt}-ramp-run")
    print(
        f"ramp {start:.0f} -> {end:.0f} req/s over {args.ramp_s:g} s: {step.errors} failed, "
        f"p99 {step.p99_ms:.1f} ms (SLO {slo_ms:g})"
    )
    return {**step.describe(), "from_rps": round(start), "to_rps": round(end)}


def overload(
    kind: str, fmt: str, max_rps: float, args: argparse.Namespace, work: Path
) -> dict[str, Any]:
    _, slo_ms = FUNCTIONS[kind]
    rate = min(10 * max_rps, args.overload_cap_rps)
    out = work / f"{kind}-{fmt}-overload"
    with gateway(work / f"{kind}-{fmt}-ol", functions_toml(kind, args), config_sections()) as gw:
        gw.wait_ready(kind)
        step = run_step(gw, kind, slo_ms, rate, fmt, args, out)
    rows = records(out)
    lost = sum(1 for r in rows if r["status"] not in ("200", "429"))
    good = sum(1 for r in rows if r["status"] == "200" and float(r["latency_ms"]) <= slo_ms)
    goodput = good / args.step_s
    figures = {
        **step.describe(),
        "offered_x_max": round(rate / max(1.0, max_rps), 1),
        "lost": lost,
        "goodput_rps": round(goodput),
        "goodput_over_max": round(goodput / max(1.0, max_rps), 2),
    }
    print(
        f"overload: {step.offered_rps:.0f} req/s offered ({figures['offered_x_max']}x the "
        f"max at SLO): admitted p99 {step.p99_ms:.1f} ms (SLO {slo_ms:g}), goodput "
        f"{goodput:.0f} req/s = {figures['goodput_over_max']} of the max, "
        f"{step.rejected_429} refused ({step.missing_retry_after} without Retry-After), "
        f"{lost} lost"
    )
    return figures


def run_function(
    kind: str, args: argparse.Namespace, costs: ModelCosts, work: Path
) -> dict[str, Any]:
    image, slo_ms = FUNCTIONS[kind]
    limit = costs.limit_items_per_s
    print(
        f"\n{kind} ({image}, SLO {slo_ms:g} ms): in-process limit {limit:.0f} items/s "
        f"(batch {costs.limit_batch}, {costs.threads} threads)",
        flush=True,
    )
    figures: dict[str, Any] = {"in_process": costs.describe()}
    for fmt in args.formats:
        print(f"{fmt} bodies\n{HEADER}", flush=True)
        result = ladder(kind, fmt, costs, args, work)
        print(
            f"max at SLO with no error: {result['max_fraction_at_slo']:.2f} of the limit "
            f"({result['max_rps_at_slo']} req/s)"
        )
        max_rps = float(result["max_rps_at_slo"]) or limit * args.fractions[0]
        if args.idle_step:
            result["idle_step"] = step_from_idle(kind, fmt, max_rps / 2, args, work)
        if args.ramp_s > 0:
            result["ramp"] = ramp(kind, fmt, 0.05 * limit, max_rps, args, work)
        if args.overload:
            result["overload"] = overload(kind, fmt, max_rps, args, work)
        figures[fmt] = result
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--functions", nargs="+", choices=sorted(FUNCTIONS), default=["text", "vision"]
    )
    parser.add_argument(
        "--formats", nargs="+", choices=["json", "msgpack", "raw"], default=["json", "raw"]
    )
    parser.add_argument("--step-s", type=float, default=10.0)
    parser.add_argument("--warmup-s", type=float, default=5.0)
    parser.add_argument("--max-batch", type=int, default=32)
    parser.add_argument("--max-requests", type=int, default=400_000)
    parser.add_argument("--fractions", type=rate_list, default=DEFAULT_FRACTIONS)
    parser.add_argument("--idle-step", action="store_true", help="a step from idle, too")
    parser.add_argument("--idle-s", type=float, default=10.0)
    parser.add_argument("--ramp-s", type=float, default=0.0, help="a slow ramp this long")
    parser.add_argument("--overload", action="store_true", help="10x the max at SLO, too")
    parser.add_argument("--overload-cap-rps", type=float, default=20_000.0)
    parser.add_argument("--limit-s", type=float, default=1.0, help="per in-process cell")
    args = parser.parse_args(argv)
    build_models(*(FUNCTIONS[k][0] for k in args.functions))
    figures: dict[str, Any] = {"bench": "slo", "step_s": args.step_s}
    with tempfile.TemporaryDirectory() as tmp:
        for kind in args.functions:
            costs = measure(FUNCTIONS[kind][0], args.limit_s)
            figures[kind] = run_function(kind, args, costs, Path(tmp))
    figures["summary"] = summary(figures, args)
    print(json.dumps(figures))
    return 0


def summary(figures: Mapping[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """The fractions of the limit held at the SLO, per function and format."""
    return {
        f"{kind}_{fmt}": figures[kind][fmt]["max_fraction_at_slo"]
        for kind in args.functions
        for fmt in args.formats
    }


if __name__ == "__main__":
    raise SystemExit(main())

"""Maximum sustained RPS under the SLO of two function mixes, per scaling policy (INFless §5.2).

For each mix and each policy, in one run on this machine: a fresh gateway (127.0.0.1, port 0,
temp state dir, `state/bench-models`) with `[scaling] policy` set, the mix deployed through
`POST /system/functions` one function at a time (each instance times its batch sizes when it
starts; timings taken while another warms up are inflated), then `bench.mixsearch` finds the
highest total rate (split evenly across the mix's functions, Poisson, one JSON sample per
request) at which every function keeps p99 <= SLO, no request fails (429 counts) and >= 97 %
of the offered rate is achieved. Each step warms up at its rate (excluded) so the autoscaler
can react, then measures. Prints a table per mix (max RPS, p99 per function, the instance
configurations at the best passing step), the ratios INFless/BATCH and INFless/OpenFaaS+
(the paper: 2.6x and 5.2x), and a last JSON line.

Mixes (`--mixes`):
- `qa`: the paper's Q&A robot, textcnn-69 + lstm-2365 + dssm-2365, SLO 50 ms, max batch 16.
- `vision`: resnet-20-cifar + mobilenet, SLO 200 ms, max batch 32. Both run a sample in a
  few ms on one core and gain 3-5x from batching, so a 2-core machine serves them at
  hundreds of RPS; mnist (~0.3 ms a sample) would only measure the gateway's JSON path.
- `osvt` (optional, not in the default set): the paper's ssd + mobilenet + resnet-50 at
  200 ms. One resnet-50 sample took 170 ms on one core here (ssd: 62 ms; machine shared), so
  resnet-50 cannot batch within the SLO (b > 1 needs t_exec <= 100 ms) and the mix serves a
  few RPS: searches dominated by noise.

Platform settings, the same for every policy (flags): `[scaling] cpu_options = [1, 2]`,
`cpu_overcommit` just enough for one 1-core instance per function (qa: 1.5, i.e. 3
instance-cores on 2 cores; vision: 1: more would let every policy start instances that only
slow each other down), `baseline_cpus = 1` (openfaas+ / batch instances get 1 core: the 2-core
default leaves no room for a 3-function mix, and 2-thread instances run slower than 1-thread
ones on this shared machine),
`[batching] dispatch = "adaptive"`, `queue_capacity_batches = 4` (the platform's defaults).
Others' CPU use during each search is measured and printed: the machine may be shared.
On a shared machine use `--repeats N`: N interleaved rounds of every policy, each policy's
best round counts (interference only ever lowers a maximum); every round is in the JSON.

    .venv/bin/python -m bench.throughput [--quick] [--mixes qa vision] [--policies ...]
        [--step-s 10] [--warmup-s 5] [--max-steps 7]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from bench.harness import BENCH_MODELS, Gateway, gateway
from bench.mixsearch import MixSearchOptions, MixSearchResult, search_mix
from bench.sharing import other_cpu_cores, other_cpu_s
from bench.throughput_runs import MIXES, Mix, PolicyRun, describe_step, print_table, ratios
from infless.scaling.config import POLICY_NAMES
from loadgen.maxrate import SearchConfig
from loadgen.runner import discover_functions

QUICK_POLICIES = ("infless", "batch", "openfaas+")
BUILD_COMMAND = (sys.executable, "-m", "infless.cli", "models", "build")
SETTLE_QUIET_S = 3.0  # no instance starting or draining, and no change, for this long
SETTLE_TIMEOUT_S = 90.0


def cpu_overcommit(mix: Mix, args: argparse.Namespace) -> float:
    """The flag, else the least that fits one 1-core instance per function of the mix."""
    if args.cpu_overcommit is not None:
        return float(args.cpu_overcommit)
    return max(1.0, len(mix.images) / (os.cpu_count() or 1))


def gateway_toml(policy: str, args: argparse.Namespace, overcommit: float) -> str:
    cpu_options = ", ".join(str(c) for c in args.cpu_options)
    return (
        "[workers]\ncpus_per_instance = 1\n"
        f'[batching]\ndispatch = "{args.dispatch}"\n'
        f"queue_capacity_batches = {args.queue_batches}\n"
        f'[scaling]\npolicy = "{policy}"\ntick_s = {args.tick_s}\n'
        f"cpu_options = [{cpu_options}]\ncpu_overcommit = {overcommit}\n"
        f"baseline_cpus = {args.baseline_cpus}\n"
    )


def wait_settled(gw: Gateway, timeout_s: float = SETTLE_TIMEOUT_S) -> None:
    """Until no instance starts or drains and the set of instances stays put for
    SETTLE_QUIET_S: a policy may replace the pool's first instances before any load."""
    deadline = time.monotonic() + timeout_s
    last: object = None
    quiet_since = time.monotonic()
    while time.monotonic() < deadline:
        instances = gw.get("/system/instances")
        key = sorted((i["id"], i["state"]) for i in instances)
        busy = any(i["state"] in ("starting", "draining") for i in instances)
        if key != last or busy:
            last, quiet_since = key, time.monotonic()
        elif time.monotonic() - quiet_since >= SETTLE_QUIET_S:
            return
        time.sleep(0.5)
    print(f"    (instances still changing after {timeout_s:g} s; measuring anyway)", flush=True)


def deploy(gw: Gateway, mix: Mix) -> None:
    """One function at a time, each ready and settled before the next: an instance times its
    batch sizes when it starts, and timings taken while others warm up are inflated."""
    for body in mix.deployments():
        request = urllib.request.Request(
            gw.url + "/system/functions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            response.read()
        gw.wait_ready(body["service"], timeout_s=120.0)
        wait_settled(gw)


def build_models(mixes: list[Mix]) -> None:
    for image in sorted({i for m in mixes for i in m.images}):
        subprocess.run(
            [*BUILD_COMMAND, image, "--repository", str(BENCH_MODELS)],
            check=True,
            stdout=subprocess.DEVNULL,
        )


def run_policy(mix: Mix, policy: str, search: SearchConfig, args: argparse.Namespace) -> PolicyRun:
    load_before = os.getloadavg()
    started = time.monotonic()
    others = 0.0
    result: MixSearchResult | None = None
    error = ""
    print(f"  {mix.name} / {policy}", flush=True)
    try:
        with (
            tempfile.TemporaryDirectory(prefix="infless-throughput-") as tmp,
            gateway(Path(tmp), "", gateway_toml(policy, args, cpu_overcommit(mix, args))) as gw,
        ):
            deploy(gw, mix)
            functions = asyncio.run(discover_functions(gw.url, list(mix.images)))
            options = MixSearchOptions(warmup_s=args.warmup_s, seed=args.seed)
            others_before, search_started = other_cpu_s(), time.monotonic()
            result = asyncio.run(
                search_mix(
                    gw.url,
                    functions,
                    search,
                    options,
                    lambda step, outcome: print(describe_step(step, outcome), flush=True),
                )
            )
            others = other_cpu_cores(
                others_before, other_cpu_s(), time.monotonic() - search_started
            )
    except Exception as exc:  # one policy failing must not lose the others' figures
        error = f"{type(exc).__name__}: {exc}"
        print(f"    error: {error}", flush=True)
    seconds = time.monotonic() - started
    print(f"    {seconds:.0f} s; other tenants used {others:.2f} cores meanwhile", flush=True)
    return PolicyRun(
        policy=policy,
        result=result,
        error=error,
        load_before=load_before,
        load_after=os.getloadavg(),
        seconds=seconds,
        other_cpu_cores=others,
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--mixes", nargs="+", choices=sorted(MIXES), default=None)
    parser.add_argument("--policies", nargs="+", choices=POLICY_NAMES, default=None)
    parser.add_argument("--quick", action="store_true", help="3 policies, shorter steps")
    parser.add_argument("--step-s", type=float, default=None, help="measured s per step")
    parser.add_argument("--warmup-s", type=float, default=None, help="excluded s per step")
    parser.add_argument("--max-steps", type=int, default=None, help="steps per search")
    parser.add_argument("--growth", type=float, default=2.0)
    parser.add_argument("--precision", type=float, default=0.15, help="bisection stop")
    parser.add_argument("--max-rate-rps", type=float, default=1500.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--repeats", type=int, default=1, help="interleaved rounds; each policy's best counts"
    )
    parser.add_argument("--dispatch", choices=("adaptive", "deadline", "eager"), default="adaptive")
    parser.add_argument("--queue-batches", type=int, default=4, help="[batching] queue bound")
    parser.add_argument("--tick-s", type=float, default=0.5)
    parser.add_argument("--cpu-options", type=int, nargs="+", default=[1, 2])
    parser.add_argument(
        "--cpu-overcommit", type=float, default=None, help="default: one core per function"
    )
    parser.add_argument("--baseline-cpus", type=int, default=1, help="openfaas+/batch cores")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats {args.repeats}: need at least 1")
    args.mixes = args.mixes or ["qa", "vision"]
    args.policies = args.policies or list(QUICK_POLICIES if args.quick else POLICY_NAMES)
    args.step_s = args.step_s or (6.0 if args.quick else 10.0)
    args.warmup_s = args.warmup_s if args.warmup_s is not None else (4.0 if args.quick else 5.0)
    args.max_steps = args.max_steps or 7
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    mixes = [MIXES[m] for m in args.mixes]
    build_models(mixes)
    load_start = os.getloadavg()
    print(
        f"cpus {os.cpu_count()}, load average {load_start[0]:.2f} {load_start[1]:.2f} "
        f"{load_start[2]:.2f}; steps {args.warmup_s:g} s warm-up + {args.step_s:g} s measured, "
        f"<= {args.max_steps} per search; policies {', '.join(args.policies)}",
        flush=True,
    )
    all_runs: dict[str, list[PolicyRun]] = {}  # the best round of each policy
    per_round: dict[str, dict[str, list[float]]] = {}
    for mix in mixes:
        search = SearchConfig(
            start_rps=mix.start_rps,
            growth=args.growth,
            max_steps=args.max_steps,
            max_rate_rps=args.max_rate_rps,
            precision=args.precision,
            step_s=args.step_s,
            min_rate_rps=mix.start_rps / 4,
            pause_s=2.0,
        )
        rounds = [
            [run_policy(mix, p, search, args) for p in args.policies] for _ in range(args.repeats)
        ]
        all_runs[mix.name] = [
            max((r[k] for r in rounds), key=lambda run: run.max_rps)
            for k in range(len(args.policies))
        ]
        per_round[mix.name] = {
            p: [round(r[k].max_rps, 1) for r in rounds] for k, p in enumerate(args.policies)
        }
    for mix in mixes:
        print_table(mix, all_runs[mix.name])
        mix_ratios = ratios(all_runs[mix.name])
        if mix_ratios:
            print("  ratios: " + ", ".join(f"{k} {v}x" for k, v in mix_ratios.items()))
    load_end = os.getloadavg()
    print(f"load average at the end {load_end[0]:.2f} {load_end[1]:.2f} {load_end[2]:.2f}")
    figures = {
        "max_rps": {
            m: {r.policy: round(r.max_rps, 1) for r in runs} for m, runs in all_runs.items()
        },
        "configs": {
            m: {r.policy: [c.to_json() for c in r.best.configs] if r.best else [] for r in runs}
            for m, runs in all_runs.items()
        },
        "ratios": {m: ratios(runs) for m, runs in all_runs.items()},
        "p99_ms": {
            m: {
                r.policy: {f: round(s.latency.p99_ms, 2) for f, s in r.best.summaries.items()}
                if r.best
                else {}
                for r in runs
            }
            for m, runs in all_runs.items()
        },
        "steps": {  # (total rate, pass) of every step of the best round, in search order
            m: {
                r.policy: [[s.verdict.rate_rps, s.verdict.passed] for s in r.result.steps]
                if r.result
                else []
                for r in runs
            }
            for m, runs in all_runs.items()
        },
        "errors": {m: {r.policy: r.error for r in runs if r.error} for m, runs in all_runs.items()},
        "other_cpu_cores": {
            m: {r.policy: round(r.other_cpu_cores, 2) for r in runs} for m, runs in all_runs.items()
        },
        "load_avg": {
            "start": [round(x, 2) for x in load_start],
            "end": [round(x, 2) for x in load_end],
            "per_run_1min": {
                m: {r.policy: [round(r.load_before[0], 2), round(r.load_after[0], 2)] for r in runs}
                for m, runs in all_runs.items()
            },
        },
        "rounds_max_rps": per_round,
        "settings": {
            "step_s": args.step_s,
            "warmup_s": args.warmup_s,
            "max_steps": args.max_steps,
            "repeats": args.repeats,
            "dispatch": args.dispatch,
            "queue_batches": args.queue_batches,
            "cpu_options": args.cpu_options,
            "cpu_overcommit": {m.name: cpu_overcommit(m, args) for m in mixes},
            "baseline_cpus": args.baseline_cpus,
            "cpus": os.cpu_count(),
        },
    }
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""`infless simulate`: the server's policies on simulated servers, at any scale.

    infless simulate --servers 2000 --gpus-per-server 2 --functions 40 --instances 10000
    infless simulate --mix qa --servers 8 --mode request --rate-rps 3000 --policies infless batch

Builds a mix on the models measured here (`sim.mixes`, `sim.latency`), sized by a total
peak rate (`--rate-rps`) or by the instances INFless plans for the peaks (`--instances`),
runs it under each policy (`--mode fluid`: decisions level, the default; `request`: one event
per request), and prints per policy the requests, violations, cores and GPUs per 100 RPS,
cost per request, fragment ratio, and the scheduling overhead measured in the same run: the
wall time of every plan the autoscaler made, in total and per instance started (the first
plan starts the whole fleet for the t = 0 rates: INFless Figure 17). Ends with one JSON line.
`--config FILE` reads `[sim]` and the server's sections (`sim.settings`). Torch-free.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import cast

import msgspec

from infless.scaling.config import POLICY_NAMES
from infless.scaling.predictors import LatencyPredictor, ScaledPredictor
from infless.scaling.view import ServerView
from infless.sim import mixes
from infless.sim.cluster import SimFunction
from infless.sim.engine import Simulation
from infless.sim.fluid import FluidSimulation
from infless.sim.latency import load_zoo
from infless.sim.overhead import Scheduled, schedule_once
from infless.sim.results import SimResult
from infless.sim.settings import SimConfig, check_sim, load_sim_config, server_shape

PLANNER_OFFSET = 1.1  # the planner sees the truth through INFless §3.3's 10 % offset


def configure(parser: argparse.ArgumentParser, name: str) -> None:
    del name
    parser.add_argument("--config", type=Path, help="a TOML file: [sim] and server sections")
    parser.add_argument("--mix", choices=["scale", "qa", "osvt"], default="scale")
    parser.add_argument("--functions", type=int, default=40, help="scale mix: how many")
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--instances", type=int, help="size the loads for this many instances")
    size.add_argument("--rate-rps", type=float, help="the mix's total peak rate")
    parser.add_argument("--shape", choices=[*mixes.SHAPES, "mixed"], default="mixed")
    parser.add_argument("--servers", type=int, help="servers (default: the config's, or 2000)")
    parser.add_argument("--cpus-per-server", type=int)
    parser.add_argument("--gpus-per-server", type=int)
    parser.add_argument("--mode", choices=["fluid", "request"])
    parser.add_argument("--duration-s", type=float)
    parser.add_argument("--seed", type=int)
    parser.add_argument(
        "--policies", nargs="+", default=["infless"], choices=POLICY_NAMES, metavar="POLICY"
    )
    parser.add_argument("--json", action="store_true", help="print only the JSON line")


def build_config(args: argparse.Namespace) -> SimConfig:
    cfg = (
        load_sim_config(args.config)
        if args.config
        else SimConfig(servers=2000, gpus_per_server=2, mode="fluid", duration_s=30.0, step_s=0.25)
    )
    given = {
        "servers": args.servers,
        "cpus_per_server": args.cpus_per_server,
        "gpus_per_server": args.gpus_per_server,
        "mode": args.mode,
        "duration_s": args.duration_s,
        "seed": args.seed,
    }
    cfg = msgspec.structs.replace(cfg, **{k: v for k, v in given.items() if v is not None})
    problems = check_sim(cfg)
    if problems:
        raise SystemExit("; ".join(problems))
    return cfg


def build_mix(args: argparse.Namespace, cfg: SimConfig) -> tuple[SimFunction, ...]:
    shapes = mixes.SHAPES if args.shape == "mixed" else (cast(mixes.Shape, args.shape),)
    rate = args.rate_rps or 1000.0
    if args.mix == "scale":
        measured = mixes.scale_models(load_zoo().models)
        functions = mixes.scale_mix(args.functions, rate, cfg.duration_s, shapes, measured)
    else:
        build = mixes.qa if args.mix == "qa" else mixes.osvt
        functions = build(rate, cfg.duration_s, shapes[0])
    if args.instances:
        _, planner = truth_and_planner(cfg)
        functions = mixes.sized(functions, args.instances, servers(cfg), planner, cfg.scaling)
    return functions


def servers(cfg: SimConfig) -> list[ServerView]:
    views = []
    for k in range(cfg.servers):
        cores, gpus = server_shape(cfg, k)
        views.append(ServerView(f"s{k:04d}", cores, cores, (100,) * gpus, (100,) * gpus))
    return views


def truth_and_planner(cfg: SimConfig) -> tuple[LatencyPredictor, LatencyPredictor]:
    """The latency truth of the measured models (GPUs where the servers have them) and what
    the planner sees of it (INFless §3.3's offset)."""
    truth = load_zoo().truth(gpus=any(server_shape(cfg, k)[1] for k in range(cfg.servers)))
    return truth, ScaledPredictor(truth, PLANNER_OFFSET)


def simulate_policy(
    functions: Sequence[SimFunction], cfg: SimConfig, policy: str
) -> tuple[Simulation | FluidSimulation, SimResult]:
    """The simulation of `functions` under `policy` (its `world` holds the details), run."""
    truth, planner = truth_and_planner(cfg)
    cfg = msgspec.structs.replace(cfg, scaling=msgspec.structs.replace(cfg.scaling, policy=policy))
    memory = load_zoo().memory
    sim: Simulation | FluidSimulation
    if cfg.mode == "fluid":
        sim = FluidSimulation(functions, truth, cfg, planner_predictor=planner, memory=memory)
    else:
        sim = Simulation(functions, truth, cfg, planner_predictor=planner, memory=memory)
    return sim, sim.run()


def summary(result: SimResult, scheduled: Scheduled) -> dict[str, object]:
    usage = result.usage
    return {
        "requests": result.requests,
        "violation_rate": round(result.violation_rate, 5),
        "p99_ms": round(result.p99_ms, 2),
        "cores_per_100_rps": round(result.cores_per_100_rps, 3),
        "gpus_per_100_rps": round(result.gpus_per_100_rps, 4),
        "cost_per_request": result.cost_per_request(),
        "cpu_fragment": round(usage.cpu_fragment, 4),
        "gpu_fragment": round(usage.gpu_fragment, 4),
        "peak_instances": result.peak_instances,
        "plan_s": round(usage.plan_s, 4),
        "plan_us_per_instance": round(1e6 * usage.plan_s / max(1, usage.planned_starts), 2),
        "schedule_peak": {
            "instances": scheduled.instances,
            "seconds": round(scheduled.seconds, 4),
            "us_per_instance": round(scheduled.us_per_instance, 2),
            "cpu_fragment": round(scheduled.cpu_fragment, 4),
            "gpu_fragment": round(scheduled.gpu_fragment, 4),
        },
    }


def run(args: argparse.Namespace) -> int:
    cfg = build_config(args)
    functions = build_mix(args, cfg)
    _, planner = truth_and_planner(cfg)
    figures: dict[str, dict[str, object]] = {}
    for policy in args.policies:
        scheduled = schedule_once(functions, servers(cfg), planner, cfg.scaling, policy)
        _, result = simulate_policy(functions, cfg, policy)
        figures[policy] = summary(result, scheduled)
        if not args.json:
            _print(policy, result, scheduled, cfg)
    print(
        json.dumps(
            {
                "simulate": {
                    "servers": cfg.servers,
                    "functions": len(functions),
                    "mode": cfg.mode,
                    "policies": figures,
                }
            }
        )
    )
    return 0


def _print(policy: str, result: SimResult, scheduled: Scheduled, cfg: SimConfig) -> None:
    usage = result.usage
    print(
        f"{policy:10s} {result.requests} requests, {100 * result.violation_rate:.2f} % "
        f"violations (p99 {result.p99_ms:.1f} ms), {result.cores_per_100_rps:.3f} cores and "
        f"{result.gpus_per_100_rps:.4f} GPUs per 100 RPS, fragments {100 * usage.cpu_fragment:.1f}"
        f" % of the cores, peak {result.peak_instances} instances"
    )
    print(
        f"{'':10s} scheduling the peak at once: {scheduled.instances} instances on "
        f"{cfg.servers} servers in {scheduled.seconds:.3f} s ({scheduled.us_per_instance:.1f} us "
        f"per instance), fragments {100 * scheduled.cpu_fragment:.1f} % of the cores; every "
        f"tick's plan: {usage.plan_s:.2f} s in total"
    )

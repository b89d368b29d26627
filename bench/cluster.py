"""What the cluster's data path costs: TCP-attached workers (a node agent's, over Ray) against
local workers (a socketpair), in the same run.

1. Per batch: one text worker started by a node agent (`infless.nodes`, reached over
   loopback TCP with its token) and one started the local way (socketpair), same model,
   same core; batches of one sample sent back to back, alternating in blocks; the round
   trip less the worker's own execution time is the transport's share.
2. Per request, through a gateway: the shipped settings with the text function (TextCNN,
   SLO 50 ms), once with local workers (`infless serve`) and once on a one-node Ray cluster
   with this machine's cores (`--cluster local:1`, `cluster.local_cpus` = all cores);
   the client (`infless loadgen synthetic`, open loop, one sample per request) offers a low
   rate (the gateway's overhead: p50 less the worker's execution time at batch 1) and then
   a ladder of rates (as `bench.slo`): the highest rate kept up with p99 within the SLO.

    .venv/bin/python -m bench.cluster [--batches 3000] [--step-s 8] [--rates 500,1000,...]

Prints its figures and ends with one JSON line. Everything targets 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from bench.harness import BENCH_MODELS, build_models
from bench.harness import gateway as start_gateway
from bench.steps import HEADER, config_sections, rate_list, row, run_step, summarize
from infless.clock import RealClock, perf_s
from infless.config import Config, with_overrides
from infless.nodes.agent import NodeAgent
from infless.nodes.factory import make_starter, make_store
from infless.nodes.remote import RemoteStarter
from infless.types import InstanceConfig
from infless.workers import protocol as p
from infless.workers.handle import WorkerHandle
from infless.workers.starting import BootOrder

MODEL, SLO_MS = "textcnn-64", 50.0
RATES = (500, 1000, 1500, 2000, 2500, 3000, 3500, 4000)


def _order(instance_id: str, core: int) -> BootOrder:
    return BootOrder(
        instance_id=instance_id,
        tenant="bench",
        package_dir=BENCH_MODELS / MODEL,
        config=InstanceConfig(1, 1),
        cpu_ids=(core,),
        warmup_batch_sizes=(1,),
    )


async def _timed(handle: WorkerHandle, count: int) -> tuple[list[float], list[float]]:
    tokens = np.arange(1, 65, dtype=np.int64).reshape(1, 64)
    inputs = {"token_ids": p.TensorData("int64", [1, 64], tokens.tobytes())}
    rtt, transport = [], []
    for _ in range(count):
        started = perf_s()
        result = await handle.run_batch(inputs)
        took = (perf_s() - started) * 1000.0
        rtt.append(took)
        transport.append(took - result.exec_ms)
    return rtt, transport


async def per_batch(batches: int, work: Path) -> dict[str, Any]:
    config = with_overrides(
        Config(),
        state={"dir": str(work / "state")},
        store={"root": str(Path(tempfile.mkdtemp(prefix="infless-bench-", dir="/dev/shm")))},
        cluster={"node_dir": str(work / "nodes")},
        batching={"warmup_rounds": 1},
    )
    core = max(os.sched_getaffinity(0))
    agent = NodeAgent(msgspec.json.encode(config), "bench-node-0", "127.0.0.1", [core])
    remote = RemoteStarter(agent, "bench")
    store = make_store(config, RealClock())
    local = make_starter(config, store, None)
    await local.start()
    tcp = (await remote.boot(_order("tcp", core))).handle
    pair = (await local.boot(_order("pair", core))).handle
    samples: dict[str, tuple[list[float], list[float]]] = {"tcp": ([], []), "socketpair": ([], [])}
    try:
        for _ in range(10):  # alternate blocks: both see the same machine noise
            for name, handle in (("tcp", tcp), ("socketpair", pair)):
                rtt, transport = await _timed(handle, batches // 10)
                samples[name][0].extend(rtt)
                samples[name][1].extend(transport)
    finally:
        for handle in (tcp, pair):
            await handle.stop(5.0)
        await remote.release("tcp")
        await local.release("pair")
        await local.close()
        await agent.close()
        if store is not None:
            store.close()
            shutil.rmtree(store.root, ignore_errors=True)
    figures: dict[str, Any] = {}
    for name, (rtt, transport) in samples.items():
        figures[name] = {
            "rtt_p50_ms": float(np.percentile(rtt, 50)),
            "rtt_p99_ms": float(np.percentile(rtt, 99)),
            "transport_p50_us": float(np.percentile(transport, 50)) * 1000.0,
            "transport_p99_us": float(np.percentile(transport, 99)) * 1000.0,
        }
    figures["added_p50_us"] = (
        figures["tcp"]["transport_p50_us"] - figures["socketpair"]["transport_p50_us"]
    )
    return figures


def per_request(mode: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    extra = config_sections()
    if mode == "cluster":
        cores = len(os.sched_getaffinity(0))
        extra += f'\n[cluster]\nbackend = "ray"\naddress = "local:1"\nlocal_cpus = {cores}\n'
        extra += f'node_dir = "{work / "nodes"}"\n'
    functions = (
        f'[[functions]]\nname = "text"\nimage = "{MODEL}"\nslo_ms = {SLO_MS}\n'
        f"max_batch = {args.max_batch}\ninstances = 1\n"
    )
    with start_gateway(work / mode, functions, extra) as gw:
        gw.wait_ready("text")
        low = run_step(gw, "text", SLO_MS, args.low_rps, "json", args, work / f"{mode}-low")
        exec_ms = min(
            i["execMsByBatch"].get("1", 0.0)
            for i in gw.get("/system/instances")
            if i["execMsByBatch"]
        )
        print(
            f"\n{mode}: {args.low_rps:g} req/s, p50 {low.p50_ms:.2f} ms (exec at b=1 "
            f"{exec_ms:.2f} ms)\n{HEADER}",
            flush=True,
        )
        steps = []
        for rate in args.rates:
            step = run_step(gw, "text", SLO_MS, rate, "json", args, work / f"{mode}-{rate}")
            steps.append(step)
            print(row(step, SLO_MS), flush=True)
            if not step.kept_up:
                break
    return {
        "low_rate_p50_ms": low.p50_ms,
        "exec_ms_b1": exec_ms,
        "gateway_overhead_ms": low.p50_ms - exec_ms,
        **summarize(steps, SLO_MS),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=3000)
    parser.add_argument("--step-s", type=float, default=8.0)
    parser.add_argument("--low-rps", type=float, default=100.0)
    parser.add_argument("--rates", type=rate_list, default=RATES)
    parser.add_argument("--max-batch", type=int, default=32)
    parser.add_argument("--max-requests", type=int, default=100_000)
    parser.add_argument("--skip-gateway", action="store_true", help="per-batch figures only")
    args = parser.parse_args(argv)
    build_models(MODEL)
    figures: dict[str, Any] = {"bench": "cluster"}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        figures["per_batch"] = asyncio.run(per_batch(args.batches, work))
        batch = figures["per_batch"]
        print(
            f"per batch (b=1, {args.batches} each): TCP transport p50 "
            f"{batch['tcp']['transport_p50_us']:.0f} us, socketpair "
            f"{batch['socketpair']['transport_p50_us']:.0f} us: "
            f"+{batch['added_p50_us']:.0f} us over loopback TCP",
            flush=True,
        )
        if not args.skip_gateway:
            for mode in ("local", "cluster"):
                figures[mode] = per_request(mode, args, work)
    if not args.skip_gateway:
        local, cluster = figures["local"], figures["cluster"]
        print(
            f"\ngateway overhead at {args.low_rps:g} req/s: local "
            f"{local['gateway_overhead_ms']:.2f} ms, cluster {cluster['gateway_overhead_ms']:.2f}"
            f" ms; max rate within the SLO: local {local['max_rps_within_slo']:.0f}, cluster "
            f"{cluster['max_rps_within_slo']:.0f} req/s"
        )
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Model-less serving against fixed variants, under a load that steps low -> high -> low.

One gateway, one session, three runs of the same open-loop Poisson load (the client on the
same cores, one sample per request, bounded in time and count, loopback only):

1. **model-less**: the model registered with `POST /system/register` (variants generated
   and profiled by the gateway), queries to `/function/{model}` under the `default`
   application's goals (SLO, minimum accuracy): per-query selection and model-vertical
   scaling pick the variant;
2. **fixed fp32**: the fp32 variant's package deployed as an ordinary function, replicated
   by the same autoscaler (INFless's Algorithm 1): horizontal scaling only;
3. **fixed fastest**: the same with the variant that serves the most requests per core.

Per run: requests, SLO violations (answers later than the SLO, plus refusals and errors),
p50/p99, mean accuracy served (each answer counts its variant's measured accuracy), the
core-seconds its instances held (polled every 0.5 s: starting, ready and draining ones),
and the vertical switches. The registration's variant table is printed first, and the
selection's cost at 100 variants (`select` over 100 cards) at the end.

    .venv/bin/python -m bench.modelless [--image lstm-2365] [--slo-ms 50] [--min-accuracy 0.95]
        [--low-s 20] [--high-s 30] [--tail-s 40] [--low-rps R] [--high-rps R]
        [--runs modelless,fp32,fastest] [--log-level WARNING]

Prints a table and ends with one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import tempfile
import threading
import time
import timeit
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from bench.harness import Gateway, gateway
from loadgen.bodies import make_bodies
from loadgen.functions import parse_function_status

MODEL = "mlbench"


@dataclass
class Run:
    name: str
    requests: int = 0
    ok: int = 0
    violations: int = 0
    refused: int = 0
    errors: int = 0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    accuracy: float = 0.0
    core_s: float = 0.0
    switches: int = 0
    by_variant: dict[str, int] = field(default_factory=dict)
    phases: list[dict[str, float]] = field(default_factory=list)


def post(url: str, body: object) -> tuple[int, Any]:
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def delete(url: str, body: object | None = None) -> int:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url, data, {"Content-Type": "application/json"}, method="DELETE"
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def register(gw: Gateway, args: argparse.Namespace) -> dict[str, Any]:
    body = {
        "model": MODEL, "image": args.image, "sloMs": args.slo_ms, "maxBatch": args.max_batch,
        "validation": {"generate": args.validation}, "variants": args.variants.split(","),
        "cpus": [1],
        "apps": [{"id": "default", "minAccuracy": args.min_accuracy}],
    }  # fmt: skip
    status, answer = post(gw.url + "/system/register", body)
    if status != 202:
        raise RuntimeError(f"register: {status} {answer}")
    started = time.monotonic()
    while time.monotonic() - started < 1800:
        time.sleep(2.0)
        document: dict[str, Any] = gw.get(f"/system/variants/{MODEL}")
        if document["status"] == "ready":
            return document
        if document["status"] == "failed":
            raise RuntimeError(f"registration failed: {document['error']}")
    raise RuntimeError("registration did not finish in 30 min")


class CorePoller:
    """Integrates the cores held by the instances of some functions, every 0.5 s."""

    def __init__(self, gw: Gateway, functions: set[str]) -> None:
        self._gw, self._functions = gw, functions
        self.core_s = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> CorePoller:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(0.5):
            cores = sum(
                i["cpus"] for i in self._gw.get("/system/instances")
                if i["function"] in self._functions and i["state"] != "dead"
            )  # fmt: skip
            now = time.monotonic()
            self.core_s += cores * (now - last)
            last = now


async def open_loop(
    url: str, bodies: list[bytes], phases: list[tuple[float, float]], slo_ms: float,
    max_requests: int, seed: int,
) -> tuple[list[tuple[float, int, str, int]], list[dict[str, float]]]:  # fmt: skip
    """Poisson arrivals at each phase's rate for its duration; per answer (latency ms,
    status, variant, phase)."""
    rng = random.Random(seed)
    results: list[tuple[float, int, str, int]] = []
    connector = aiohttp.TCPConnector(limit=2000)
    timeout = aiohttp.ClientTimeout(total=30)
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def one(body: bytes, phase: int) -> None:
            t0 = time.perf_counter()
            try:
                async with session.post(url, data=body, headers=headers) as response:
                    await response.read()
                    variant = response.headers.get("X-Infless-Variant", "")
                    results.append(
                        ((time.perf_counter() - t0) * 1000, response.status, variant, phase)
                    )
            except (aiohttp.ClientError, TimeoutError):
                results.append(((time.perf_counter() - t0) * 1000, 599, "", phase))

        tasks: list[asyncio.Task[None]] = []
        start = time.perf_counter()
        due = 0.0
        sent = 0
        for index, (rate, seconds) in enumerate(phases):
            end = due + seconds
            while sent < max_requests:
                due += rng.expovariate(rate)
                if due >= end:
                    due = end
                    break
                delay = start + due - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.create_task(one(bodies[sent % len(bodies)], index)))
                sent += 1
        await asyncio.gather(*tasks)
    summary = []
    for index, (rate, _) in enumerate(phases):
        mine = [r for r in results if r[3] == index]
        ok = sorted(r[0] for r in mine if r[1] == 200)
        summary.append({
            "rate_rps": rate, "requests": len(mine),
            "violations": sum(1 for r in mine if r[1] != 200 or r[0] > slo_ms),
            "p99_ms": round(ok[int(0.99 * (len(ok) - 1))], 1) if ok else 0.0,
        })  # fmt: skip
    return results, summary


def measure(
    gw: Gateway, name: str, target: str, functions: set[str], accuracy: dict[str, float],
    fixed: str | None, bodies: list[bytes], args: argparse.Namespace,
    phases: list[tuple[float, float]],
) -> Run:  # fmt: skip
    switches_before = gw.get(f"/system/variants/{MODEL}").get("switches", 0) if not fixed else 0
    with CorePoller(gw, functions) as poller:
        results, summary = asyncio.run(open_loop(
            f"{gw.url}/function/{target}", bodies, phases, args.slo_ms, args.max_requests,
            args.seed,
        ))  # fmt: skip
        time.sleep(1.0)
    run = Run(name, requests=len(results), phases=summary, core_s=round(poller.core_s, 1))
    latencies = sorted(r[0] for r in results if r[1] == 200)
    run.ok = len(latencies)
    run.refused = sum(1 for r in results if r[1] == 429)
    run.errors = sum(1 for r in results if r[1] not in (200, 429))
    run.violations = sum(1 for r in results if r[1] != 200 or r[0] > args.slo_ms)
    if latencies:
        run.p50_ms = round(statistics.median(latencies), 1)
        run.p99_ms = round(latencies[int(0.99 * (len(latencies) - 1))], 1)
    served = [r[2] or fixed or "" for r in results if r[1] == 200]
    for variant in served:
        run.by_variant[variant] = run.by_variant.get(variant, 0) + 1
    run.accuracy = round(statistics.fmean(accuracy[v] for v in served), 4) if served else 0.0
    if not fixed:
        run.switches = gw.get(f"/system/variants/{MODEL}")["switches"] - switches_before
    return run


def selection_cost_us() -> float:
    """Median µs of one `select` over 100 variant cards (all Active, goals met by half)."""
    from infless.modelless.cards import VariantCard
    from infless.modelless.profiles import Goals
    from infless.modelless.selection import Catalogue, select
    from infless.modelless.states import VariantState

    cards = [
        VariantCard(f"v{k}", f"m--v{k}", 0.9 + k / 1000, 1.0 + k / 10, 8, 1, 5.0, 1000.0 - k,
                    100.0, 1 << 20)
        for k in range(100)
    ]  # fmt: skip
    catalogue = Catalogue.of(cards)
    states = {c.name: VariantState.ACTIVE for c in cards}
    goals = Goals(latency_ms=6.0, min_accuracy=0.95)
    runs = timeit.repeat(lambda: select(catalogue, states, goals), number=1000, repeat=7)
    return round(statistics.median(runs) / 1000 * 1e6, 2)


def main(argv: list[str] | None = None) -> int:  # noqa: PLR0915 - one linear script
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", default="lstm-2365")
    parser.add_argument("--slo-ms", type=float, default=50.0)
    parser.add_argument("--max-batch", type=int, default=16)
    parser.add_argument("--min-accuracy", type=float, default=0.95)
    parser.add_argument("--variants", default="fp32,bf16,int8,torchscript")
    parser.add_argument("--validation", type=int, default=256)
    parser.add_argument("--low-rps", type=float, default=0.0, help="0: 25 %% of one fp32 instance")
    parser.add_argument(
        "--high-rps", type=float, default=0.0, help="0: 160 %% of one fp32 instance"
    )
    parser.add_argument("--low-s", type=float, default=20.0)
    parser.add_argument("--high-s", type=float, default=30.0)
    parser.add_argument("--tail-s", type=float, default=40.0)
    parser.add_argument("--max-requests", type=int, default=120_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--runs", default="modelless,fp32,fastest", help="which runs, comma-separated"
    )
    parser.add_argument("--log-level", default="WARNING", help="the gateway's (to stderr)")
    args = parser.parse_args(argv)
    chosen = set(args.runs.split(","))

    with (
        tempfile.TemporaryDirectory(prefix="infless-modelless-") as scratch,
        gateway(Path(scratch), "", "[coldstart]\nscale_to_zero = false\n", args.log_level) as gw,
    ):
        document = register(gw, args)
        variants = {v["name"]: v for v in document["variants"] if v["status"] == "ready"}
        print(f"registered {MODEL} from {args.image} in {document['generation_s']} s")
        print(f"{'variant':<12}{'accuracy':>9}{'b1 ms':>8}{'config':>8}{'qps':>7}"
              f"{'load ms':>9}{'peak MB':>9}")  # fmt: skip
        for v in document["variants"]:
            b1 = min((p["measured_ms"] for p in v["latency"] if p["batch_size"] == 1), default=0.0)
            config = v.get("config") or {}
            shape = f"b{config['batchSize']}c{config['cpus']}" if config else "-"
            print(
                f"{v['name']:<12}{v.get('accuracy') or 0:>9.4f}{b1:>8.2f}{shape:>8}"
                f"{config.get('qps', 0):>7.0f}{v.get('load_ms') or 0:>9.0f}"
                f"{(v.get('peak_memory_bytes') or 0) / 2**20:>9.0f}"
                + ("" if v["status"] == "ready" else f"  {v['status']}: {v['error'][:60]}")
            )
        accuracy = {name: float(v["accuracy"]) for name, v in variants.items()}
        servable = {n: v for n, v in variants.items() if v.get("meetsSlo")}
        for name in sorted(set(variants) - set(servable)):
            print(f"{name}: {variants[name].get('sloProblem')}")
        eligible = {n: v for n, v in servable.items() if v["accuracy"] >= args.min_accuracy}
        if not eligible:
            error = (f"no variant meets both the {args.slo_ms:g}-ms SLO and accuracy "
                     f"{args.min_accuracy} on this host: raise --slo-ms")  # fmt: skip
            print(error)
            print(json.dumps({"bench": "modelless", "image": args.image, "error": error}))
            return 2
        fastest = max(
            eligible, key=lambda n: eligible[n]["config"]["qps"] / eligible[n]["config"]["cpus"]
        )
        # the load is sized by fp32's capacity (the fixed baseline); where fp32 cannot meet
        # the SLO here, by the slowest variant that can
        reference = "fp32" if "fp32" in servable else min(
            servable, key=lambda n: float(servable[n]["config"]["qps"])
        )  # fmt: skip
        fp32_qps = float(servable[reference]["config"]["qps"])
        low = args.low_rps or round(0.25 * fp32_qps)
        high = args.high_rps or round(1.6 * fp32_qps)
        phases = [(low, args.low_s), (high, args.high_s), (low, args.tail_s)]
        print(
            f"load: {low:g} rps for {args.low_s:g} s, {high:g} for {args.high_s:g} s, "
            f"{low:g} for {args.tail_s:g} s; SLO {args.slo_ms:g} ms; min accuracy "
            f"{args.min_accuracy}; fastest eligible: {fastest}"
        )
        status = gw.get(f"/system/function/{MODEL}--fp32")
        bodies = list(make_bodies(parse_function_status(status), 512, args.seed))
        runs = []
        variant_functions = {f"{MODEL}--{n}" for n in variants}
        if "modelless" in chosen:
            runs.append(measure(gw, "model-less", MODEL, variant_functions, accuracy, None,
                                bodies, args, phases))  # fmt: skip
        delete(f"{gw.url}/system/models/{MODEL}")
        fixed = (("fixed fp32", "fp32", "fp32"), (f"fixed {fastest}", fastest, "fastest"))
        for label, variant, key in fixed:
            if key not in chosen:
                continue
            name = f"fixed-{variant}"
            spec = {"service": name, "image": variants[variant]["package_dir"],
                    "annotations": {"com.infless.latency_target": f"{args.slo_ms:g}ms"},
                    "labels": {"com.infless.max.batch": str(args.max_batch),
                               "com.openfaas.scale.min": "1"}}  # fmt: skip
            code, answer = post(gw.url + "/system/functions", spec)
            if code >= 400:
                raise RuntimeError(f"deploy {name}: {code} {answer}")
            gw.wait_ready(name)
            runs.append(measure(gw, label, name, {name}, accuracy, variant, bodies, args, phases))
            delete(f"{gw.url}/system/functions", {"functionName": name})
            time.sleep(2.0)

    print(
        f"\n{'run':<16}{'requests':>9}{'viol.':>7}{'429':>6}{'err':>5}{'p50':>7}{'p99':>8}"
        f"{'accuracy':>9}{'core-s':>8}{'switch':>7}  variants"
    )
    for run in runs:
        print(
            f"{run.name:<16}{run.requests:>9}{run.violations:>7}{run.refused:>6}{run.errors:>5}"
            f"{run.p50_ms:>7.1f}{run.p99_ms:>8.1f}{run.accuracy:>9.4f}{run.core_s:>8.1f}"
            f"{run.switches:>7}  {run.by_variant}"
        )
        print("   per phase: " + "; ".join(
            f"{p['rate_rps']:g} rps: {p['violations']}/{p['requests']} late, p99 {p['p99_ms']}"
            for p in run.phases))  # fmt: skip
    select_us = selection_cost_us()
    by_name = {r.name: r for r in runs}
    modelless, fp32 = by_name.get("model-less", Run("-")), by_name.get("fixed fp32", Run("-"))
    figures = {
        "bench": "modelless", "image": args.image, "slo_ms": args.slo_ms,
        "min_accuracy": args.min_accuracy, "phases_rps": [low, high, low],
        "runs": [asdict(r) for r in runs],
        "violations_ratio_fp32_over_modelless": round(
            fp32.violations / max(1, modelless.violations), 2),
        "core_s_ratio_fp32_over_modelless": round(fp32.core_s / max(1e-9, modelless.core_s), 2),
        "select_us_at_100_variants": select_us,
        "generation_s": document["generation_s"],
    }  # fmt: skip
    print(f"selection over 100 variants: {select_us} us per query")
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

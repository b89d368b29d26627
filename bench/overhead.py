"""What the platform costs: a tiny model through HTTP + gateway + worker vs called in-process.

Same run, same machine: (1) the model in this process, one sample per call; (2) the same
model deployed on infless, driven over HTTP with one JSON sample per request, closed-loop at
concurrency 1 (latency) and at high concurrency (throughput); (3) the same at high
concurrency with the compact body (raw little-endian tensor bytes); (4) the same raw bytes to
the same model packaged with a trivial handler (`bench.raw_handler`: bytes to tensor and
back, in the worker). Prints a table, the ratios, the gateway process's CPU time per request
(its own, workers excluded) for each, and a final JSON line.

    .venv/bin/python -m bench.overhead [--model mnist] [--seconds 10] [--concurrency 64]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.harness import BENCH_MODELS, RunStats, drive, gateway, percentile_ms


def in_process(model_name: str, seconds: float) -> RunStats:
    import torch

    from infless.models.loader import load_model

    torch.set_num_threads(1)
    manifest, module = load_model(BENCH_MODELS / model_name)
    specs = manifest.input_specs
    inputs = [
        torch.zeros((1, *[8 if d < 0 else d for d in s.shape]), dtype=getattr(torch, s.dtype))
        for s in specs
    ]
    latencies: list[float] = []
    with torch.inference_mode():
        for _ in range(20):
            module(*inputs)
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            t0 = time.perf_counter()
            module(*inputs)
            latencies.append(time.perf_counter() - t0)
        elapsed = time.perf_counter() - started
    return RunStats(
        len(latencies), 0, elapsed, percentile_ms(latencies, 50), percentile_ms(latencies, 99)
    )


def sample_body(model_name: str) -> bytes:
    manifest = json.loads((BENCH_MODELS / model_name / "manifest.json").read_text())
    inputs = {
        s["name"]: np.zeros([8 if d < 0 else d for d in s["shape"]]).astype(s["dtype"]).tolist()
        for s in manifest["inputs"]
    }
    value = next(iter(inputs.values())) if len(inputs) == 1 else inputs
    return json.dumps({"inputs": value}).encode()


def sample_raw(model_name: str) -> tuple[bytes, str]:
    """The same zero sample as raw tensor bytes (one-input models), and its content type."""
    manifest = json.loads((BENCH_MODELS / model_name / "manifest.json").read_text())
    (spec,) = manifest["inputs"]
    shape = [8 if d < 0 else d for d in spec["shape"]]
    return np.zeros(shape, dtype=spec["dtype"]).tobytes(), "application/octet-stream"


def handler_package(model_name: str, out: Path) -> Path:
    """The zoo model packaged again with `infless.package`, around `bench.raw_handler`."""
    import torch

    from infless.models.loader import load_model
    from infless.packaging.package import package

    manifest, module = load_model(BENCH_MODELS / model_name)
    (spec,) = manifest.input_specs
    example = torch.zeros(
        (2, *[8 if d < 0 else d for d in spec.shape]), dtype=getattr(torch, spec.dtype)
    )
    info = package(
        module,
        {spec.name: example},
        name=f"{model_name}-raw-handler",
        out=out,
        arch_kwargs=manifest.arch_kwargs,
        outputs=[s.name for s in manifest.output_specs],
        handler="bench.raw_handler:RawHandler",
    )
    return info.path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mnist")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--slo-ms", type=float, default=50.0)
    parser.add_argument("--max-batch", type=int, default=16)
    parser.add_argument("--instances", type=int, default=1)
    args = parser.parse_args()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "infless.cli",
            "models",
            "build",
            args.model,
            "--repository",
            str(BENCH_MODELS),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    direct = in_process(args.model, args.seconds)
    body = sample_body(args.model)
    functions = (
        f'[[functions]]\nname = "bench"\nimage = "{args.model}"\nslo_ms = {args.slo_ms}\n'
        f"max_batch = {args.max_batch}\ninstances = {args.instances}\n"
    )
    with tempfile.TemporaryDirectory() as scratch:
        handled = handler_package(args.model, Path(scratch) / "handled")
        functions += (
            f'[[functions]]\nname = "handled"\nimage = "{handled}"\nslo_ms = {args.slo_ms}\n'
            f"max_batch = {args.max_batch}\ninstances = {args.instances}\n"
        )
        return measure(args, direct, body, functions)


def measure(args: argparse.Namespace, direct: RunStats, body: bytes, functions: str) -> int:
    with tempfile.TemporaryDirectory() as tmp, gateway(Path(tmp), functions) as gw:
        gw.wait_ready("bench", args.instances)
        gw.wait_ready("handled", args.instances)
        drive(gw, "bench", body, 8, 2.0)  # warm the connection pool and caches
        single = drive(gw, "bench", body, 1, args.seconds)
        loaded = drive(gw, "bench", body, args.concurrency, args.seconds)
        raw_body, raw_type = sample_raw(args.model)
        loaded_raw = drive(gw, "bench", raw_body, args.concurrency, args.seconds, raw_type)
        drive(gw, "handled", raw_body, args.concurrency, 3.0, raw_type)  # its tail learnt
        handled = drive(gw, "handled", raw_body, args.concurrency, args.seconds, raw_type)
        instances = [i for i in gw.get("/system/instances") if i["function"] == "bench"]
    rows = [
        ("in-process, 1 sample/call", direct),
        ("HTTP, concurrency 1", single),
        (f"HTTP, concurrency {args.concurrency}", loaded),
        (f"HTTP raw body, concurrency {args.concurrency}", loaded_raw),
        (f"raw body + handler, conc. {args.concurrency}", handled),
    ]
    print(
        f"model {args.model}, SLO {args.slo_ms:g} ms, max batch {args.max_batch}, "
        f"{args.instances} instance(s)"
    )
    print(
        f"{'path':32} {'req/s':>10} {'p50 ms':>9} {'p99 ms':>9} {'errors':>7} {'gw CPU us/req':>14}"
    )
    for label, stats in rows:
        cpu = f"{stats.gateway_cpu_us_per_request:.0f}" if stats.gateway_cpu_s else "-"
        print(
            f"{label:32} {stats.rps:10.0f} {stats.p50_ms:9.2f} {stats.p99_ms:9.2f} "
            f"{stats.errors:7d} {cpu:>14}"
        )
    figures = {
        "model": args.model,
        "in_process_rps": round(direct.rps, 1),
        "in_process_p50_ms": round(direct.p50_ms, 3),
        "http_c1_rps": round(single.rps, 1),
        "http_c1_p50_ms": round(single.p50_ms, 3),
        "http_c1_p99_ms": round(single.p99_ms, 3),
        "http_loaded_rps": round(loaded.rps, 1),
        "http_loaded_p50_ms": round(loaded.p50_ms, 3),
        "http_loaded_p99_ms": round(loaded.p99_ms, 3),
        "http_loaded_errors": loaded.errors,
        "gateway_cpu_us_per_request": round(loaded.gateway_cpu_us_per_request, 1),
        "http_loaded_raw_rps": round(loaded_raw.rps, 1),
        "gateway_cpu_us_per_request_raw": round(loaded_raw.gateway_cpu_us_per_request, 1),
        "http_loaded_handler_rps": round(handled.rps, 1),
        "http_loaded_handler_p99_ms": round(handled.p99_ms, 3),
        "http_loaded_handler_errors": handled.errors,
        "gateway_cpu_us_per_request_handler": round(handled.gateway_cpu_us_per_request, 1),
        "latency_overhead_ms_c1": round(single.p50_ms - direct.p50_ms, 3),
        "throughput_ratio_http_over_in_process": round(loaded.rps / direct.rps, 3),
        "batch_sizes": [i["batchSize"] for i in instances],
    }
    print(
        f"HTTP/in-process throughput ratio: {figures['throughput_ratio_http_over_in_process']}, "
        f"added p50 latency at concurrency 1: {figures['latency_overhead_ms_c1']} ms"
    )
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""In-process throughput of small zoo models by batch size and torch thread count.

Baseline in the same run: batch 1 on one thread. For each model, batch size (1, 8, 32) and
thread count (1, 2) it times forward passes of seeded weights under `torch.inference_mode`
(a short warm-up, then at least `--seconds` of calls), and prints items/s, the speed-up
over the baseline, then one JSON line with every figure.

    .venv/bin/python -m bench.zoo_throughput [--models textcnn-69 ...] [--seconds 1.0]
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from infless.models.build import build_seeded_module
from infless.models.kernels import prefer_onednn
from infless.models.zoo import ZOO, zoo_entry

DEFAULT_MODELS = ("textcnn-69", "resnet-20-cifar", "mnist")
BATCH_SIZES = (1, 8, 32)
THREAD_COUNTS = (1, 2)


def _inputs(name: str, batch_size: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    tensors = []
    for spec in ZOO[name].inputs:
        shape = (batch_size, *spec.shape)
        if spec.dtype.startswith("float"):
            tensors.append(torch.randn(shape, generator=generator))
        else:
            tensors.append(torch.randint(0, 1000, shape, generator=generator))
    return tensors


def items_per_s(module: torch.nn.Module, inputs: list[torch.Tensor], min_s: float) -> float:
    batch_size = inputs[0].shape[0]
    with torch.inference_mode():
        for _ in range(3):
            module(*inputs)
        calls = 0
        started = time.perf_counter()
        while (elapsed_s := time.perf_counter() - started) < min_s or calls < 5:
            module(*inputs)
            calls += 1
    return calls * batch_size / elapsed_s


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS))
    parser.add_argument("--seconds", type=float, default=1.0, help="minimum timing per cell")
    args = parser.parse_args(argv)
    for name in args.models:
        zoo_entry(name)
    results: dict[str, dict[str, float]] = {}
    print(f"{'model':16s} {'threads':>7s} {'batch':>5s} {'items/s':>10s} {'vs b1/t1':>9s}")
    for name in args.models:
        module = build_seeded_module(ZOO[name])
        prefer_onednn(module)  # the kernels a worker runs
        figures: dict[str, float] = {}
        for threads in THREAD_COUNTS:
            torch.set_num_threads(threads)
            for batch_size in BATCH_SIZES:
                rate = items_per_s(module, _inputs(name, batch_size), args.seconds)
                figures[f"t{threads}_b{batch_size}"] = round(rate, 1)
                ratio = rate / figures["t1_b1"]
                print(f"{name:16s} {threads:7d} {batch_size:5d} {rate:10.1f} {ratio:8.2f}×")
        results[name] = figures
    print(json.dumps({"bench": "zoo_throughput", "items_per_s": results}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

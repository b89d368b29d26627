"""What the machine can do without infless, measured in the same run as the SLO bench: the
in-process forward of a zoo model, seeded weights, `torch.inference_mode`, at each batch
size on 1 and 2 threads — items per second and CPU per item (the process's CPU time, so
spinning threads count).

The **in-process limit** is the best items/s over the batch sizes with as many threads as
the machine has cores: the rate a perfect server would sustain with no HTTP, no IPC and no
client. `cpu_us_per_item(b, threads)` is the model's own cost at a batch size, what the
server's CPU per request is compared with.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import torch

from infless.models.build import build_seeded_module
from infless.models.kernels import prefer_onednn
from infless.models.zoo import ZOO, zoo_entry

BATCH_SIZES = (1, 2, 4, 8, 16, 32)


@dataclass(frozen=True)
class ModelCosts:
    model: str
    threads: int  # the machine's cores: the limit's thread count
    items_per_s: dict[tuple[int, int], float] = field(default_factory=dict)  # (b, threads)
    cpu_us_per_item: dict[tuple[int, int], float] = field(default_factory=dict)

    @property
    def limit_items_per_s(self) -> float:
        return max(v for (_, t), v in self.items_per_s.items() if t == self.threads)

    @property
    def limit_batch(self) -> int:
        return max(
            (b for (b, t) in self.items_per_s if t == self.threads),
            key=lambda b: self.items_per_s[(b, self.threads)],
        )

    def cost_us(self, batch_size: int, threads: int) -> float:
        """CPU per item at the nearest measured batch size (not above), `threads` threads."""
        threads = min(max(1, threads), self.threads)
        sizes = sorted(b for (b, t) in self.cpu_us_per_item if t == threads)
        nearest = max((b for b in sizes if b <= batch_size), default=sizes[0])
        return self.cpu_us_per_item[(nearest, threads)]

    def describe(self) -> dict[str, object]:
        return {
            "limit_items_per_s": round(self.limit_items_per_s, 1),
            "limit_batch": self.limit_batch,
            "threads": self.threads,
            "items_per_s": {f"b{b}/t{t}": round(v, 1) for (b, t), v in self.items_per_s.items()},
            "cpu_us_per_item": {
                f"b{b}/t{t}": round(v, 1) for (b, t), v in self.cpu_us_per_item.items()
            },
        }


def _inputs(name: str, batch_size: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    tensors = []
    for spec in ZOO[name].inputs:
        shape = (batch_size, *(8 if d < 0 else d for d in spec.shape))
        if spec.dtype.startswith("float"):
            tensors.append(torch.randn(shape, generator=generator))
        else:
            tensors.append(torch.randint(0, 1000, shape, generator=generator))
    return tensors


def measure(name: str, min_s: float = 1.0) -> ModelCosts:
    """Items/s and CPU per item of `name` at every batch size on 1 and all cores."""
    cores = len(os.sched_getaffinity(0))
    module = build_seeded_module(zoo_entry(name)).eval()
    prefer_onednn(module)
    costs = ModelCosts(name, cores)
    previous = torch.get_num_threads()
    try:
        for threads in sorted({1, cores}):
            torch.set_num_threads(threads)
            for batch_size in BATCH_SIZES:
                inputs = _inputs(name, batch_size)
                with torch.inference_mode():
                    for _ in range(3):
                        module(*inputs)
                    calls = 0
                    cpu0, wall0 = time.process_time(), time.perf_counter()
                    while (wall := time.perf_counter() - wall0) < min_s or calls < 5:
                        module(*inputs)
                        calls += 1
                    cpu = time.process_time() - cpu0
                items = calls * batch_size
                costs.items_per_s[(batch_size, threads)] = items / wall
                costs.cpu_us_per_item[(batch_size, threads)] = cpu / items * 1e6
    finally:
        torch.set_num_threads(previous)
    return costs

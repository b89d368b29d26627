"""The simulator's latency truth from measurements (`data/`), and what it assumes beyond them.

- CPU (`cpu_latency.tsv`): execution times per (model, b, c) that `infless profile` and
  the combined-operator predictor gave on this host (`python -m infless.sim.export`), at the
  thread counts profiled here (1 and 2: the host has two cores). **Assumption** for more
  cores: Amdahl's law fitted per model and batch size on the two measured counts —
  t(c) = s + p / c with t(1) = s + p and t(2) = s + p / 2 (no speed-up when two threads were
  not faster) — with a serial part of at least `SERIAL_FLOOR` of t(1) (operators too small
  to split, a thread pool's barriers: at most 6.4× on 16 cores). Batch sizes between
  measured ones: linear (`TablePredictor`).
- GPU (`models.json`, `gpu_assumption`): no GPU has profiled these models yet, so GPU
  profiles are **made from INFless's Table 1** — each model's GFLOPs, on the paper's RTX
  2080Ti (Table 2) at an assumed achieved share of its peak, plus an assumed launch cost per
  compute operator: t(b, g) = launch + b · GFLOPs / (achieved TFLOPS · g / 100), at the
  shares a profile would measure. They go through the planner's own `GpuProfilePredictor`
  (linear in 1/g between shares), exactly as `infless profile --gpu` rows would; replace
  them with measured rows when a GPU machine has run `bench.gpu`.
- Memory (`models.json`): weights and activations per sample from the profiled graphs,
  a worker's private runtime (`sim.memory`, an assumption).

Reads the package's data files (no state directory, no torch).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from infless.scaling.gpu_profiles import GpuProfilePredictor
from infless.scaling.predictors import LatencyPredictor, TablePredictor
from infless.sim.memory import MIB, ModelMemory

DATA_DIR = Path(__file__).resolve().parent / "data"
TABLE_FILE = "cpu_latency.tsv"
MODELS_FILE = "models.json"
BATCHES = (1, 2, 4, 8, 16, 32)
SERIAL_FLOOR = 0.1  # the least serial share of a batch's 1-thread time (Amdahl beyond 2)


@dataclass(frozen=True, slots=True)
class GpuRow:
    """One made-up GPU profile point (`scaling.gpu_profiles.GpuMeasurement`)."""

    device_name: str
    model_key: str
    batch_size: int
    gpu_pct: int
    exec_ms: float


@dataclass(frozen=True, slots=True)
class GpuAssumption:
    device: str
    peak_tflops: float
    achieved: float  # the share of the peak a model's kernels reach
    launch_us_per_operator: float
    shares_pct: tuple[int, ...]

    def exec_ms(self, gflops: float, operators: int, batch_size: int, gpu_pct: int) -> float:
        compute_ms = batch_size * gflops / (self.peak_tflops * self.achieved * gpu_pct / 100.0)
        return operators * self.launch_us_per_operator / 1000.0 + compute_ms


class AmdahlPredictor:
    """Measured thread counts as they are; more cores by Amdahl's law fitted on the two
    largest measured counts (see the module docstring); GPU shares are not its business."""

    def __init__(self, table: TablePredictor) -> None:
        self._table = table

    def predict_latency_ms(
        self, model_key: str, batch_size: int, cpus: int, gpu_pct: int = 0
    ) -> float:
        if gpu_pct > 0:
            raise LookupError(f"{model_key!r}: CPU measurements only")
        measured = sorted({c for _, c, _ in self._table.configurations(model_key)})
        if not measured:
            raise LookupError(f"no measured latency for {model_key!r}")
        if cpus in measured or len(measured) < 2 or cpus < measured[-1]:
            nearest = max((c for c in measured if c <= cpus), default=measured[0])
            return self._table.predict_latency_ms(model_key, batch_size, nearest)
        c0, c1 = measured[-2], measured[-1]
        t0 = self._table.predict_latency_ms(model_key, batch_size, c0)
        t1 = self._table.predict_latency_ms(model_key, batch_size, c1)
        # t(c) = s + p / c through (c0, t0) and (c1, t1), then s at least the floor
        parallel = max(0.0, (t0 - t1) / (1.0 / c0 - 1.0 / c1))
        serial = max(t1 - parallel / c1, SERIAL_FLOOR * t0)
        parallel = max(0.0, (t1 - serial) * c1)
        return serial + parallel / cpus


@dataclass(frozen=True, slots=True)
class Zoo:
    """The measured models: the CPU table, memory figures, and the GPU assumption."""

    table: TablePredictor
    memory: dict[str, ModelMemory]
    gflops: dict[str, float]
    operators: dict[str, int]
    gpu: GpuAssumption
    provenance: str

    @property
    def models(self) -> list[str]:
        return sorted(m for m in self.memory if self.table.configurations(m))

    def gpu_rows(self, models: Iterable[str] | None = None) -> list[GpuRow]:
        rows = []
        for model in models or self.models:
            gflops, operators = self.gflops.get(model), self.operators.get(model)
            if gflops is None or operators is None:
                continue
            for g in self.gpu.shares_pct:
                for b in BATCHES:
                    ms = self.gpu.exec_ms(gflops, operators, b, g)
                    rows.append(GpuRow(self.gpu.device, model, b, g, ms))
        return rows

    def truth(self, gpus: bool = True) -> LatencyPredictor:
        """Latency per (model, b, c, g): the CPU table (with more cores by Amdahl), and with
        `gpus` the GPU shares from the made-up profiles."""
        cpu = AmdahlPredictor(self.table)
        if not gpus:
            return cpu
        return GpuProfilePredictor(self.gpu_rows(), [self.gpu.device], cpu)


@cache
def load_zoo(data_dir: Path = DATA_DIR) -> Zoo:
    table = TablePredictor.parse_reference((data_dir / TABLE_FILE).read_text(encoding="utf-8"))
    document = json.loads((data_dir / MODELS_FILE).read_text(encoding="utf-8"))
    runtime_bytes = int(document["runtime_mib"] * MIB)
    memory, gflops, operators = {}, {}, {}
    for name, entry in document["models"].items():
        if "weight_bytes" in entry:
            memory[name] = ModelMemory(
                int(entry["weight_bytes"]), int(entry["activation_bytes_per_sample"]), runtime_bytes
            )
            operators[name] = int(entry["compute_nodes"])
        gflops[name] = float(entry["gflops"])
    gpu = document["gpu_assumption"]
    assumption = GpuAssumption(
        gpu["device"],
        float(gpu["peak_tflops"]),
        float(gpu["achieved"]),
        float(gpu["launch_us_per_operator"]),
        tuple(int(g) for g in gpu["shares_pct"]),
    )
    return Zoo(table, memory, gflops, operators, assumption, str(document["provenance"]))


def measured_models(zoo: Zoo, wanted: Sequence[str]) -> list[str]:
    """The models of `wanted` the zoo data has, in that order."""
    have = set(zoo.models)
    return [m for m in wanted if m in have]

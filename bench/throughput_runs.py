"""What `bench.throughput` runs and reports: the function mixes, one policy's search, and
the tables and ratios printed from them.

Owns the records and their printing. It must not start a gateway or send load:
`bench.throughput` does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from bench.mixsearch import MixSearchResult, StepOutcome
from infless.registry.deployment import LATENCY_ANNOTATION, MAX_BATCH_LABEL
from loadgen.stats import FunctionSummary

NOISY_CORES = 0.5  # others used this many cores or more: the figure is suspect
RATIOS = (("infless", "batch"), ("infless", "openfaas+"))


@dataclass(frozen=True, slots=True)
class Mix:
    name: str
    images: tuple[str, ...]
    slo_ms: float
    max_batch: int
    start_rps: float  # the search's first total rate

    def deployments(self) -> list[dict[str, Any]]:
        """OpenFaaS FunctionDeployments of the mix (POST /system/functions)."""
        return [
            {
                "service": image,
                "image": image,
                "annotations": {LATENCY_ANNOTATION: f"{self.slo_ms:g}ms"},
                "labels": {MAX_BATCH_LABEL: str(self.max_batch)},
            }
            for image in self.images
        ]


MIXES: dict[str, Mix] = {
    "qa": Mix("qa", ("textcnn-69", "lstm-2365", "dssm-2365"), 50.0, 16, 30.0),
    "vision": Mix("vision", ("resnet-20-cifar", "mobilenet"), 200.0, 32, 30.0),
    "osvt": Mix("osvt", ("ssd", "mobilenet", "resnet-50"), 200.0, 8, 3.0),
}


@dataclass(frozen=True, slots=True)
class PolicyRun:
    policy: str
    result: MixSearchResult | None
    error: str
    load_before: tuple[float, float, float]
    load_after: tuple[float, float, float]
    seconds: float
    other_cpu_cores: float  # mean CPU used by processes outside this bench's tree

    @property
    def best(self) -> StepOutcome | None:
        return None if self.result is None else self.result.best

    @property
    def max_rps(self) -> float:
        best = self.best
        return 0.0 if best is None else best.verdict.rate_rps


def mean_batch(summary: FunctionSummary) -> float:
    """Mean batch size a request of this function rode in (from X-Infless-Batch-Size)."""
    sizes = {int(b): n for b, n in summary.batch_sizes.items()}
    total = sum(sizes.values())
    return sum(b * n for b, n in sizes.items()) / total if total else math.nan


def describe_step(step: int, outcome: StepOutcome) -> str:
    v = outcome.verdict
    configs = " ".join(
        f"{c.function.split('-')[0]}:{c.count}x<b{c.batch_size},c{c.cpus}>" for c in outcome.configs
    )
    starting = f" +{outcome.starting} starting" if outcome.starting else ""
    detail = "; ".join(
        f"{name.split('-')[0]} p99 {s.latency.p99_ms:.0f} q {s.queue_ms_mean:.1f} "
        f"x {s.exec_ms_mean:.1f} b {mean_batch(s):.1f}"
        + (f" err {sum(s.errors_by_code.values())} {sorted(s.errors_by_code)}" if s.errors else "")
        for name, s in outcome.summaries.items()
    )
    return (
        f"    step {step}: {v.rate_rps:7.1f} rps offered {v.offered_rps:7.1f} achieved "
        f"{v.achieved_rps:7.1f} p99 {v.p99_ms:6.1f} ms {'pass' if v.passed else 'FAIL'}  "
        f"[{configs}{starting}]\n      {detail}"
    )


def configs_text(outcome: StepOutcome | None) -> str:
    if outcome is None:
        return "-"
    return ", ".join(
        f"{c.function}: {c.count}x<b={c.batch_size},c={c.cpus}>" for c in outcome.configs
    )


def print_table(mix: Mix, runs: list[PolicyRun]) -> None:
    print(
        f"\nmix {mix.name}: {' + '.join(mix.images)}, SLO {mix.slo_ms:g} ms "
        f"(others = mean cores other tenants used during the search; * >= {NOISY_CORES:g})"
    )
    p99_heads = " ".join(f"{'p99 ' + i[:10]:>15}" for i in mix.images)
    print(
        f"{'policy':16} {'max rps':>8} {'steps':>5} {'others':>7} {p99_heads}  "
        "instances at the best step"
    )
    for run in runs:
        best = run.best
        p99s = " ".join(
            f"{best.summaries[i].latency.p99_ms:12.1f} ms" if best else f"{'-':>15}"
            for i in mix.images
        )
        steps = len(run.result.steps) if run.result else 0
        note = f"  error: {run.error}" if run.error else ""
        others = f"{run.other_cpu_cores:.2f}{'*' if run.other_cpu_cores >= NOISY_CORES else ' '}"
        print(
            f"{run.policy:16} {run.max_rps:8.1f} {steps:5d} {others:>7} {p99s}  "
            f"{configs_text(best)}{note}"
        )


def ratios(runs: list[PolicyRun]) -> dict[str, float | None]:
    rps = {r.policy: r.max_rps for r in runs}
    out: dict[str, float | None] = {}
    for num, den in RATIOS:
        if num in rps and den in rps:
            out[f"{num}/{den}"] = round(rps[num] / rps[den], 3) if rps[den] > 0 else None
    return out

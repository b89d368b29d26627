"""AvailableConfig (INFless §3.4): the configurations ⟨b, c, g⟩ a function may start with.

`candidates` answers it for one function without the residual test: every ⟨b, c, g⟩ whose
predicted t_exec meets the SLO (t_exec ≤ t_slo for b = 1, ≤ t_slo/2 for b > 1:
`bounds.rate_bounds`), largest b first, and — one line per reason — those no predictor
could price. `Knobs` are the settings it and the planner (`scaling.planner`, which adds the
residual test and placement) read, from `[scaling]` (`knobs_from`) plus the ablation
switches.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from infless.dataplane.policy import powers_of_two_up_to
from infless.scaling.bounds import rate_bounds
from infless.scaling.config import Rounding, ScalingConfig
from infless.scaling.placement import Candidate
from infless.scaling.predictors import LatencyPredictor
from infless.scaling.view import FunctionView
from infless.types import InstanceConfig


@dataclass(frozen=True, slots=True)
class Knobs:
    """Everything the planner needs from the config, plus the ablation switches."""

    alpha: float = 0.8
    headroom: float = 0.1
    release_headroom: float = 0.25
    rounding: Rounding = "paper"
    beta: float = 64.0 / 142.0
    cpu_options: tuple[int, ...] = (1, 2, 4, 8, 16)
    gpu_options_pct: tuple[int, ...] = (10, 20, 30, 40, 50, 100)
    prefer_measured: bool = True
    downsize: bool = True
    downsize_ratio: float = 0.75
    upsize: bool = True
    upsize_gain: float = 1.25
    efficiency: Literal["served", "paper"] = "served"
    min_fragment: float = 0.25
    affinity_weight: float = 0.5  # e_ij × (1 + this × affinity); 0: placement ignores sharing
    gpu_core_reserve: int = 0  # cores CPU-only instances leave for the GPUs (`capacity`)
    allow_batching: bool = True  # False: the "no batching" ablation (b = 1 only)
    max_throughput_only: bool = False  # True: "no resource scheduling" ablation


def knobs_from(cfg: ScalingConfig) -> Knobs:
    return Knobs(
        alpha=cfg.alpha,
        headroom=cfg.headroom,
        release_headroom=cfg.release_headroom,
        rounding=cfg.rounding,
        beta=cfg.beta,
        cpu_options=tuple(sorted(set(cfg.cpu_options))),
        gpu_options_pct=tuple(sorted(set(cfg.gpu_options_pct))),
        prefer_measured=cfg.prefer_measured,
        downsize=cfg.downsize,
        downsize_ratio=cfg.downsize_ratio,
        upsize=cfg.upsize,
        upsize_gain=cfg.upsize_gain,
        efficiency=cfg.efficiency,
        min_fragment=cfg.min_fragment,
        affinity_weight=cfg.affinity_weight,
        gpu_core_reserve=cfg.gpu_core_reserve,
    )


@dataclass(frozen=True, slots=True)
class Candidates:
    """AvailableConfig's answer: the feasible <b, c, g> (largest b first) and, one line per
    reason, the configurations no predictor could price ("b8/c1/g30: no GPU profile of …";
    "b8/c1/g30 and 11 more: …" when several share it). Over the SLO is infeasible, not
    unpriced."""

    feasible: tuple[Candidate, ...]
    unpriced: tuple[str, ...] = ()


def config_label(config: InstanceConfig) -> str:
    return f"b{config.batch_size}/c{config.cpus}/g{config.gpu_pct}"


def candidates(
    function: FunctionView,
    predictor: LatencyPredictor,
    knobs: Knobs,
    max_cpus: int,
    has_gpus: bool,
) -> Candidates:
    """AvailableConfig without the residual test: every feasible <b, c, g>, largest b first,
    and what could not be priced."""
    batches = powers_of_two_up_to(max(1, function.max_batch)) if knobs.allow_batching else [1]
    cpu_options = [c for c in knobs.cpu_options if c <= max_cpus]
    gpu_options = [0, *knobs.gpu_options_pct] if has_gpus else [0]
    found: list[Candidate] = []
    unpriced: dict[str, list[InstanceConfig]] = {}  # reason → the configs it left unpriced
    for b in sorted(batches, reverse=True):
        of_batch: list[Candidate] = []
        for c in cpu_options:
            for g in gpu_options:
                config = InstanceConfig(b, c, g)
                try:
                    exec_ms = predictor.predict_latency_ms(function.model_key, b, c, g)
                except (LookupError, ValueError) as exc:
                    unpriced.setdefault(str(exc) or type(exc).__name__, []).append(config)
                    continue
                if not math.isfinite(exec_ms) or exec_ms <= 0:
                    continue  # the predictor's "infeasible" (e.g. the tables' 9999)
                bounds = rate_bounds(b, exec_ms, function.slo_ms, knobs.rounding)
                if bounds.feasible:
                    units = knobs.beta * c + g
                    of_batch.append(Candidate(config, bounds, units))
        if knobs.max_throughput_only and of_batch:
            of_batch = [max(of_batch, key=lambda k: (k.bounds.r_up_rps, -k.units))]
        found.extend(of_batch)
    return Candidates(tuple(found), tuple(_reported(unpriced)))


def _reported(unpriced: dict[str, list[InstanceConfig]]) -> list[str]:
    lines = []
    for reason, configs in unpriced.items():
        more = f" and {len(configs) - 1} more" if len(configs) > 1 else ""
        lines.append(f"{config_label(configs[0])}{more}: {reason}")
    return lines

"""The `[scaling]` config section: which scaling policy runs and every knob of INFless §3.2/§3.4.

One frozen struct (msgspec, like `infless.config`) plus `check_scaling`, which returns the
problems as sentences naming the key, the value and the fix. Pure: no I/O, no environment.
"""

from __future__ import annotations

import math
from typing import Literal

import msgspec

Rounding = Literal["paper", "reference", "exact"]

# Every policy `baselines.get_policy` knows, in the order reports list them.
POLICY_NAMES: tuple[str, ...] = (
    "infless",
    "batch",
    "batch+rs",
    "openfaas+",
    "infless-nobatch",
    "infless-nors",
    "infless-x1.5",
    "infless-x2",
    "dts",
)


class DemandConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Arrival-rate estimation (`scaling.demand`): two sliding windows + a decaying peak."""

    bucket_s: float = 0.25  # arrivals are counted per bucket of this width
    short_window_s: float = 2.0  # reacts to bursts within ~2 s ("fast attack")
    long_window_s: float = 30.0  # keeps sporadic loads from reading as zero
    decay_tau_s: float = 15.0  # after a burst the estimate falls with this time constant
    trend_lookahead_s: float = 2.0  # on a ramp, plan for the rate this far ahead (0 = off)
    trend_z: float = 3.0  # a growth within this many Poisson standard deviations is noise


class FeedbackConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    enabled: bool = True
    p99_high: float = 0.8  # of the SLO: above it (or a refusal), more capacity
    p99_low: float = 0.5  # of the SLO: below it with no refusal, the pressure decays
    step: float = 0.25  # the factor grows by this much per tick under pressure
    decay: float = 0.97  # per tick without pressure, towards 1 (half-life ~11 s at 0.5 s)
    max_factor: float = 4.0


def check_feedback(cfg: FeedbackConfig, section: str) -> list[str]:
    if not 0 < cfg.p99_low <= cfg.p99_high or cfg.step <= 0 or not 0 < cfg.decay < 1:
        return [
            f"{section}: need 0 < p99_low ({cfg.p99_low}) <= p99_high ({cfg.p99_high}), "
            f"step ({cfg.step}) > 0 and decay ({cfg.decay}) in (0, 1)"
        ]
    if cfg.max_factor < 1:
        return [f"{section}.max_factor = {cfg.max_factor}: must be >= 1"]
    return []


class StabilityConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    min_lifetime_s: float = 30.0
    fall_ratio: float = 0.6  # a release within the lifetime needs demand below this share
    downsize_after_s: float = 30.0  # below its band this long before a smaller set starts


def check_stability(cfg: StabilityConfig, section: str) -> list[str]:
    if cfg.min_lifetime_s < 0 or cfg.downsize_after_s < 0 or not 0 < cfg.fall_ratio <= 1:
        return [
            f"{section}: need min_lifetime_s ({cfg.min_lifetime_s}) >= 0 and fall_ratio "
            f"({cfg.fall_ratio}) in (0, 1]"
        ]
    return []


class ScalingConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    policy: str = "infless"  # "none": no autoscaler, instance counts are set by hand
    tick_s: float = 0.5  # how often the autoscaler shell plans (the planner never reads time)
    alpha: float = 0.8  # §3.2: the band is [R_min + alpha·(R_max − R_min), R_max]
    headroom: float = 0.1  # scale out for demand × (1 + headroom): absorbs bursts during starts
    release_headroom: float = 0.25  # release only while Σ r_up stays ≥ demand × (1 + this)
    rounding: Rounding = "paper"  # Equation 1 as printed; "reference" = INFless's Go code
    cpu_options: tuple[int, ...] = (1, 2, 4, 8, 16)  # core counts an instance may get
    # GPU shares an instance may get (only with GPUs); 100: the whole-GPU instance
    gpu_options_pct: tuple[int, ...] = (10, 20, 30, 40, 50, 100)
    # β = cpu_core_gflops / gpu_pct_gflops (the reference code's figures; see `beta`)
    cpu_core_gflops: float = 64.0
    gpu_pct_gflops: float = 142.0
    efficiency: Literal["served", "paper"] = "served"  # Equation 10's numerator (planner doc)
    min_fragment: float = 0.25  # Equation 10's denominator floor (reference code: ~0.001)
    affinity_weight: float = 0.5  # e_ij × (1 + this × server affinity for the function); 0: off
    # cores a CPU-only instance leaves free on a server with a free GPU share, so GPU
    # instances (which need cores too) can still be placed there (`capacity`); 0: off
    gpu_core_reserve: int = 0
    prediction_factor: float = 1.0  # multiplies every prediction (ablations use 1.5 and 2)
    prefer_measured: bool = True  # an instance's measured t_exec beats the prediction
    downsize: bool = True  # start a smaller instance when the kept ones are underfed
    downsize_ratio: float = 0.75  # ... if the new set needs at most this share of resources
    # replace the weakest instance by a larger one on its cores when no server has room for
    # the demand left uncovered, if the new one serves at least `upsize_gain` × as much
    upsize: bool = True
    upsize_gain: float = 1.25
    keep_alive_s: float = 300.0  # openfaas+ / batch: idle surplus instances live this long
    baseline_cpus: int = 2  # openfaas+ / batch: the fixed cores of every instance
    baseline_gpu_pct: int = 0  # openfaas+ / batch: the fixed GPU share of every instance
    batch_baseline_size: int = 0  # batch: the offline batch size (0 = largest feasible)
    # dts: what one core costs against memory, in MiB (cost = memory + this × cores); see
    # `scaling.dts` for the choice of 64 (Tetris shipped 0: memory alone)
    dts_alpha_mib_per_core: float = 64.0
    cpu_overcommit: float = 1.0  # the server offers cores × this to instances (small hosts)
    demand: DemandConfig = DemandConfig()
    feedback: FeedbackConfig = FeedbackConfig()  # measured p99 and refusals add capacity
    stability: StabilityConfig = StabilityConfig()  # no release within a minimum lifetime

    @property
    def beta(self) -> float:
        """Equation 10's β: how many GPU-percent units one CPU core is worth (FLOPS ratio).

        Resource units are u = β·c + g (GPU percent): with the reference's 64 GFLOPS per
        core and 142 per GPU percent (a 14-TFLOPS GPU), a core weighs 0.45 % and 30 % of a
        GPU weighs 66 cores. So at one batch size Equation 10 prefers a GPU share only where
        it serves more than 2.2 cores' worth per percent; g > 0 wins mostly by making larger
        batches feasible (Algorithm 1 tries the largest first) and where cores run out."""
        return self.cpu_core_gflops / self.gpu_pct_gflops


def check_scaling(cfg: ScalingConfig, section: str = "scaling") -> list[str]:
    """Every problem with `cfg`, one sentence each; empty when the config is usable."""
    problems: list[str] = []
    if cfg.policy not in (*POLICY_NAMES, "none"):
        problems.append(
            f"{section}.policy = {cfg.policy!r}: unknown; use one of "
            f"{', '.join(POLICY_NAMES)} or none"
        )
    if cfg.gpu_core_reserve < 0:
        problems.append(
            f"{section}.gpu_core_reserve = {cfg.gpu_core_reserve}: must be >= 0 (0: off)"
        )
    if cfg.tick_s <= 0:
        problems.append(f"{section}.tick_s = {cfg.tick_s}: must be > 0 (e.g. 1.0)")
    if not 0.0 <= cfg.alpha <= 1.0:
        problems.append(f"{section}.alpha = {cfg.alpha}: must be within [0, 1] (paper: 0.8)")
    if cfg.headroom < 0:
        problems.append(f"{section}.headroom = {cfg.headroom}: must be >= 0 (e.g. 0.1)")
    if cfg.release_headroom < cfg.headroom:
        problems.append(
            f"{section}.release_headroom = {cfg.release_headroom}: must be >= headroom "
            f"({cfg.headroom}), else a release can trigger the next scale-out"
        )
    if not cfg.cpu_options or min(cfg.cpu_options) < 1 or cfg.cpu_overcommit < 1.0:
        problems.append(
            f"{section}.cpu_options = {list(cfg.cpu_options)}: need at least one value, all "
            f">= 1; cpu_overcommit = {cfg.cpu_overcommit}: must be >= 1"
        )
    if any(not 0 < g <= 100 for g in cfg.gpu_options_pct):
        problems.append(
            f"{section}.gpu_options_pct = {list(cfg.gpu_options_pct)}: each must be in 1..100"
        )
    if cfg.cpu_core_gflops <= 0 or cfg.gpu_pct_gflops <= 0:
        problems.append(
            f"{section}.cpu_core_gflops / gpu_pct_gflops = {cfg.cpu_core_gflops} / "
            f"{cfg.gpu_pct_gflops}: both must be > 0 (reference: 64 and 142)"
        )
    problems.extend(_check_efficiency(cfg, section))
    if cfg.prediction_factor <= 0:
        problems.append(
            f"{section}.prediction_factor = {cfg.prediction_factor}: must be > 0 (1.0 = as is)"
        )
    problems.extend(_check_resizing(cfg, section))
    problems.extend(_check_baselines(cfg, section))
    problems.extend(check_feedback(cfg.feedback, f"{section}.feedback"))
    problems.extend(check_stability(cfg.stability, f"{section}.stability"))
    d = cfg.demand
    if (
        not 0 < d.bucket_s <= d.short_window_s <= d.long_window_s
        or d.decay_tau_s <= 0
        or d.trend_lookahead_s < 0
        or d.trend_z < 0
    ):
        problems.append(
            f"{section}.demand: need 0 < bucket_s ({d.bucket_s}) <= short_window_s "
            f"({d.short_window_s}) <= long_window_s ({d.long_window_s}) and decay_tau_s "
            f"({d.decay_tau_s}) > 0, trend_lookahead_s ({d.trend_lookahead_s}) and trend_z "
            f"({d.trend_z}) >= 0"
        )
    return problems


def _check_efficiency(cfg: ScalingConfig, section: str) -> list[str]:
    """Equation 10's knobs: the fragment floor and the sharing-affinity weight."""
    problems: list[str] = []
    if not 0 < cfg.min_fragment <= 1:
        problems.append(
            f"{section}.min_fragment = {cfg.min_fragment}: must be in (0, 1] (default 0.25)"
        )
    if not 0 <= cfg.affinity_weight < math.inf:
        problems.append(
            f"{section}.affinity_weight = {cfg.affinity_weight}: must be a finite number >= 0 "
            "(0 = placement ignores sharing; default 0.5)"
        )
    return problems


def _check_resizing(cfg: ScalingConfig, section: str) -> list[str]:
    problems = []
    if not 0 < cfg.downsize_ratio <= 1:
        problems.append(f"{section}.downsize_ratio = {cfg.downsize_ratio}: must be in (0, 1]")
    if cfg.upsize_gain <= 1:
        problems.append(f"{section}.upsize_gain = {cfg.upsize_gain}: must be above 1")
    return problems


def _check_baselines(cfg: ScalingConfig, section: str) -> list[str]:
    problems: list[str] = []
    if cfg.keep_alive_s < 0:
        problems.append(f"{section}.keep_alive_s = {cfg.keep_alive_s}: must be >= 0")
    if cfg.baseline_cpus < 1 or not 0 <= cfg.baseline_gpu_pct <= 100:
        problems.append(
            f"{section}.baseline_cpus = {cfg.baseline_cpus}, baseline_gpu_pct = "
            f"{cfg.baseline_gpu_pct}: need cpus >= 1 and a GPU share in 0..100"
        )
    if not 0 <= cfg.dts_alpha_mib_per_core < math.inf:
        problems.append(
            f"{section}.dts_alpha_mib_per_core = {cfg.dts_alpha_mib_per_core}: must be a "
            "finite number >= 0 (0: memory alone, as Tetris shipped; default 64)"
        )
    if cfg.batch_baseline_size < 0:
        problems.append(
            f"{section}.batch_baseline_size = {cfg.batch_baseline_size}: must be >= 0 "
            "(0 = the largest feasible batch)"
        )
    return problems

"""The `[coldstart]` config section and the parameters of each cold-start policy.

Owns: `ColdStartConfig` (which policy the prewarm manager runs and how often it looks), the
policies' parameter records (`HistogramConfig`, `FixedConfig`, `LsthConfig`) and
`policy_settings`, which maps a policy name and its `params` table to them (the one place
that knows which parameter belongs to which policy). `check_coldstart` lists the section's
problems as sentences. Pure: no I/O, no clock; imports nothing of infless.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal

import msgspec

POLICY_NAMES = ("fixed", "hhp", "lsth")


class ColdStartConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    policy: Literal["fixed", "hhp", "lsth"] = "lsth"
    params: dict[str, float | int | bool] = {}
    tick_s: float = 1.0
    release_grace_s: float = 60.0
    scale_to_zero: bool = False


@dataclass(frozen=True, slots=True)
class HistogramConfig:
    """Parameters of one idle-time histogram and of the HHP decision on it."""

    range_min: int = 240
    bin_s: float = 60.0
    head_q: float = 0.05
    tail_q: float = 0.99
    margin: float = 0.10
    cv_threshold: float = 2.0
    min_its: int = 10
    oob_threshold: float = 0.5
    arima_margin: float = 0.15

    def __post_init__(self) -> None:
        if self.range_min < 1:
            raise ValueError(f"range_min={self.range_min}: the histogram needs >= 1 bin")
        if self.bin_s <= 0:
            raise ValueError(f"bin_s={self.bin_s}: must be > 0 seconds")
        if not 0.0 <= self.head_q < self.tail_q <= 1.0:
            raise ValueError(
                f"head_q={self.head_q}, tail_q={self.tail_q}: need 0 <= head_q < tail_q <= 1"
            )
        for name in ("margin", "arima_margin"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"{name}={value}: must be in [0, 1)")
        if not 0.0 < self.oob_threshold <= 1.0:
            raise ValueError(f"oob_threshold={self.oob_threshold}: must be in (0, 1]")
        if self.cv_threshold < 0 or self.min_its < 1:
            raise ValueError(
                f"cv_threshold={self.cv_threshold}, min_its={self.min_its}: "
                "need cv_threshold >= 0 and min_its >= 1"
            )

    @property
    def range_bins(self) -> int:
        """Number of bins; with 60 s bins this equals `range_min`."""
        return max(1, round(self.range_min * 60.0 / self.bin_s))

    @property
    def range_s(self) -> float:
        return self.range_bins * self.bin_s


@dataclass(frozen=True, slots=True)
class FixedConfig:
    keepalive_s: float = 600.0

    def __post_init__(self) -> None:
        if self.keepalive_s <= 0:
            raise ValueError(f"keepalive_s={self.keepalive_s}: must be > 0 seconds")


@dataclass(frozen=True, slots=True)
class LsthConfig:
    """LSTH (INFless §3.5): long (24 h) and short (1 h) histograms blended with γ.

    `short_per_minute`: the short histogram records one idle time per active minute (the
    gap before the minute's first arrival) rather than one per arrival, so that it shows
    the recent pattern of activity — its pauses — rather than the request rate (per
    arrival, a busy hour is thousands of zero gaps and its tail never sees a pause). The
    long histogram records every arrival, as HHP's does (γ = 1 stays HHP on 24 h).
    γ = 0.3 and per-minute sampling were chosen on the tuning split of the trace sample
    (docs/coldstart.md).
    """

    gamma: float = 0.3
    long_window_min: int = 1440
    short_window_min: int = 60
    short_min_its: int = 5
    short_per_minute: bool = True
    histogram: HistogramConfig = field(default_factory=HistogramConfig)

    def __post_init__(self) -> None:
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"gamma={self.gamma}: must be in [0, 1]")
        if not 1 <= self.short_window_min <= self.long_window_min:
            raise ValueError(
                f"short_window_min={self.short_window_min}, long_window_min="
                f"{self.long_window_min}: need 1 <= short <= long"
            )
        if self.short_min_its < 1:
            raise ValueError(f"short_min_its={self.short_min_its}: must be >= 1")
        if not isinstance(self.short_per_minute, bool):
            raise TypeError(f"short_per_minute={self.short_per_minute!r}: must be true or false")


PolicySettings = FixedConfig | HistogramConfig | LsthConfig


def policy_settings(name: str, params: Mapping[str, Any] | None = None) -> PolicySettings:
    """The parameters of policy `name`; `params` are the config fields (histogram fields for
    hhp, and for lsth either its own fields or histogram fields, which go to its histogram).
    Raises ValueError naming an unknown policy or parameter, TypeError for a wrong type."""
    params = dict(params or {})
    if name == "fixed":
        return FixedConfig(**_pick(FixedConfig, params, name))
    if name == "hhp":
        return HistogramConfig(**_pick(HistogramConfig, params, name))
    if name == "lsth":
        own = {k: v for k, v in params.items() if k in _field_names(LsthConfig)}
        rest = {k: v for k, v in params.items() if k not in own}
        histogram = HistogramConfig(**_pick(HistogramConfig, rest, name))
        return LsthConfig(**own, histogram=histogram)
    raise ValueError(f"policy={name!r}: unknown; choose one of {', '.join(POLICY_NAMES)}")


def _field_names(cls: type) -> set[str]:
    return {f.name for f in fields(cls)} - {"histogram"}


def _pick(cls: type, params: Mapping[str, Any], policy: str) -> dict[str, Any]:
    unknown = sorted(set(params) - _field_names(cls))
    if unknown:
        raise ValueError(
            f"policy {policy!r}: unknown parameter(s) {', '.join(unknown)}; "
            f"known: {', '.join(sorted(_field_names(cls)))}"
        )
    return dict(params)


def check_coldstart(cfg: ColdStartConfig, section: str = "coldstart") -> list[str]:
    """Every problem with `cfg`, one sentence each; empty when the config is usable."""
    problems: list[str] = []
    if cfg.tick_s <= 0 or cfg.release_grace_s < 0:
        problems.append(f"{section}.tick_s must be > 0 and {section}.release_grace_s >= 0")
    try:
        policy_settings(cfg.policy, cfg.params)
    except (ValueError, TypeError) as exc:
        problems.append(f"{section}.params: {exc}")
    return problems

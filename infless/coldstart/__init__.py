"""Cold starts: idle-time histograms, the fixed / HHP / LSTH policies, the prewarm manager's
lifecycle decision, and the offline trace evaluation (`infless coldstart-eval`).

Pure core (no I/O, no clock): `histogram`, `policies`, `lifecycle`, `replay`, `evaluate`.
Shell: `trace` (file loading), `report` (tables, JSON, plot), `commands` (CLI).
"""

from infless.coldstart.histogram import Branch, Histogram, HistogramConfig
from infless.coldstart.lifecycle import LifecycleAction, LifecycleDecision, decide_lifecycle
from infless.coldstart.policies import (
    ColdStartPolicy,
    FixedConfig,
    FixedPolicy,
    FixedState,
    HhpPolicy,
    HhpState,
    LsthConfig,
    LsthPolicy,
    LsthState,
    Windows,
    build_policy,
)

__all__ = [
    "Branch",
    "ColdStartPolicy",
    "FixedConfig",
    "FixedPolicy",
    "FixedState",
    "HhpPolicy",
    "HhpState",
    "Histogram",
    "HistogramConfig",
    "LifecycleAction",
    "LifecycleDecision",
    "LsthConfig",
    "LsthPolicy",
    "LsthState",
    "Windows",
    "build_policy",
    "decide_lifecycle",
]

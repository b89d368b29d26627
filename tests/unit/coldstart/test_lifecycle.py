"""The prewarm manager's lifecycle decision over a function's idle timeline."""

from __future__ import annotations

import pytest

from infless.coldstart.lifecycle import LifecycleAction, LifecycleDecision, decide_lifecycle
from infless.coldstart.policies import Windows

KEEP = LifecycleAction.KEEP
RELEASE = LifecycleAction.RELEASE_TO_ZERO
PREWARM = LifecycleAction.PREWARM
NONE = LifecycleAction.NONE
WINDOWS = Windows(prewarm_s=300.0, keepalive_s=120.0)


def at(
    now_s: float,
    *,
    warm: bool,
    windows: Windows = WINDOWS,
    idle_since_s: float | None = 1000.0,
    scale_to_zero: bool = True,
    min_instances: int = 0,
    release_grace_s: float = 0.0,
) -> LifecycleDecision:
    return decide_lifecycle(
        idle_since_s=idle_since_s,
        windows=windows,
        has_warm_instances=warm,
        scale_to_zero=scale_to_zero,
        min_instances=min_instances,
        now_s=now_s,
        release_grace_s=release_grace_s,
    )


def test_prewarm_window_releases_then_prewarms_then_releases_again() -> None:
    # idle from t=1000: unloaded until 1300, loaded until 1420, then unloaded.
    assert at(1000.0, warm=True) == LifecycleDecision(RELEASE, 1300.0)
    assert at(1100.0, warm=False) == LifecycleDecision(NONE, 1300.0)
    assert at(1300.0, warm=False) == LifecycleDecision(PREWARM, 1420.0)
    assert at(1350.0, warm=True) == LifecycleDecision(KEEP, 1420.0)
    assert at(1420.0, warm=True) == LifecycleDecision(RELEASE, None)
    assert at(5000.0, warm=False) == LifecycleDecision(NONE, None)


def test_zero_prewarm_keeps_the_instance_until_the_keep_alive_ends() -> None:
    windows = Windows(prewarm_s=0.0, keepalive_s=600.0)
    assert at(1000.0, warm=True, windows=windows) == LifecycleDecision(KEEP, 1600.0)
    assert at(1599.0, warm=True, windows=windows) == LifecycleDecision(KEEP, 1600.0)
    assert at(1600.0, warm=True, windows=windows) == LifecycleDecision(RELEASE, None)
    # an instance lost inside the keep-alive window is replaced
    assert at(1200.0, warm=False, windows=windows) == LifecycleDecision(PREWARM, 1600.0)


def test_a_floor_above_zero_is_never_released() -> None:
    assert at(99_999.0, warm=True, min_instances=1) == LifecycleDecision(KEEP, None)
    assert at(99_999.0, warm=False, min_instances=2) == LifecycleDecision(PREWARM, None)
    assert at(1100.0, warm=True, scale_to_zero=False) == LifecycleDecision(KEEP, None)
    assert at(1100.0, warm=False, scale_to_zero=False) == LifecycleDecision(PREWARM, None)


def test_without_an_idle_period_nothing_is_scheduled() -> None:
    assert at(1.0, warm=True, idle_since_s=None) == LifecycleDecision(KEEP, None)
    assert at(1.0, warm=False, idle_since_s=None) == LifecycleDecision(NONE, None)


def test_release_grace_delays_the_prewarm_window_release() -> None:
    assert at(1030.0, warm=True, release_grace_s=60.0) == LifecycleDecision(KEEP, 1060.0)
    assert at(1060.0, warm=True, release_grace_s=60.0) == LifecycleDecision(RELEASE, 1300.0)
    # the grace never extends past the prewarm point
    short = Windows(prewarm_s=30.0, keepalive_s=10.0)
    assert at(1010.0, warm=True, windows=short, release_grace_s=60.0) == LifecycleDecision(
        KEEP, 1030.0
    )


def test_invalid_arguments_name_the_field() -> None:
    with pytest.raises(ValueError, match="min_instances"):
        at(0.0, warm=True, min_instances=-1)
    with pytest.raises(ValueError, match="release_grace_s"):
        at(0.0, warm=True, release_grace_s=-1.0)
    with pytest.raises(ValueError, match="prewarm_s"):
        Windows(prewarm_s=-1.0, keepalive_s=1.0)

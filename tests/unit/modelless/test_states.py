"""The variants' state machine: thresholds of the reference, its hysteresis and decay."""

from __future__ import annotations

from infless.modelless.config import StateThresholds
from infless.modelless.states import Tracked, VariantState, WindowLoad, next_state

T = StateThresholds()
S = VariantState


def window(**kw: float) -> WindowLoad:
    base = {"replicas": 2, "batch_size": 4, "profiled_ms": 10.0, "window_s": 1.0}
    base.update(kw)
    return WindowLoad(**base)  # type: ignore[arg-type]


def test_no_ready_instance_is_inactive() -> None:
    assert next_state(Tracked(S.ACTIVE, 5.0), window(replicas=0), T).state is S.INACTIVE


def test_profiled_speed_is_active() -> None:
    got = next_state(Tracked(), window(completed=100, batches=25, service_ms=250.0), T)
    assert got == Tracked(S.ACTIVE, 10.0)


def test_slow_at_a_low_rate_is_interfered() -> None:
    # 30 ms a batch = 3x the profile (> 2.5x with two replicas); 40 rps << 0.5 x 800
    got = next_state(Tracked(), window(completed=40, batches=10, service_ms=300.0), T)
    assert got.state is S.INTERFERED


def test_slow_at_a_high_rate_is_overloaded() -> None:
    # peak = 2 x 4 x 100 = 800 rps; 500 rps served at 3x the profile
    got = next_state(Tracked(), window(completed=500, batches=125, service_ms=3750.0), T)
    assert got.state is S.OVERLOADED


def test_a_long_queue_or_a_refusal_is_overloaded() -> None:
    assert next_state(Tracked(), window(queued=700), T).state is S.OVERLOADED  # > 0.8 x 800
    assert next_state(Tracked(), window(refused=1), T).state is S.OVERLOADED


def test_one_replica_uses_the_wider_cpu_thresholds() -> None:
    # 3x the profile: interfered with two replicas (2.5x), fine with one (4x)
    load = {"completed": 40, "batches": 10, "service_ms": 300.0}
    assert next_state(Tracked(), window(replicas=1, **load), T).state is S.ACTIVE
    assert next_state(Tracked(), window(replicas=2, **load), T).state is S.INTERFERED


def test_recovery_needs_latency_under_the_recover_factor() -> None:
    prev = Tracked(S.INTERFERED, 30.0)
    # 2x the profile: no longer slow (< 2.5x), but not under 1.5x: stays interfered
    assert next_state(prev, window(batches=10, service_ms=200.0), T).state is S.INTERFERED
    # 1.2x: recovered
    assert next_state(prev, window(batches=10, service_ms=120.0), T).state is S.ACTIVE


def test_an_idle_window_decays_the_latency_so_the_variant_recovers() -> None:
    prev = Tracked(S.INTERFERED, 30.0)
    got = next_state(prev, window(), T)  # no batch in the window
    assert got == Tracked(S.ACTIVE, 2.0)  # 30 / 15 under 1.5 x 10

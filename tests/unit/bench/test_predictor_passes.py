"""bench.predictor keeps, per point, the pass whose model ran fastest (and, for comparison,
the pass fastest at one machine speed)."""

from __future__ import annotations

from bench.predictor import _fastest, _fastest_at_one_speed
from infless.profiler.operators import Measurement


def _m(fast_ms: float, ref_ms: float = 0.0) -> Measurement:
    return Measurement(
        median_ms=fast_ms,
        fast_ms=fast_ms,
        min_ms=fast_ms,
        spread=0.0,
        reps=3,
        wall_fast_ms=fast_ms,
        ref_ms=ref_ms,
    )


def test_the_pass_whose_model_ran_fastest_is_kept_with_its_own_reference_time() -> None:
    fast = _m(10.0, 1.0)
    slow_reference = _m(11.0, 1.5)  # the reference kernel ran slow: not the model
    contended = _m(12.0, 1.0)
    assert _fastest([slow_reference, fast, contended]) is fast
    assert _fastest([contended]) is contended


def test_at_one_machine_speed_a_slow_reference_kernel_wins() -> None:
    slow_machine = _m(12.0, 1.5)  # 8 ms at the other pass's speed
    kept = _m(10.0, 1.0)
    assert _fastest_at_one_speed([kept, slow_machine]) is slow_machine
    contended = _m(12.0, 1.0)  # same speed, just slower: a neighbour, not the machine
    assert _fastest_at_one_speed([kept, contended]) is kept


def test_without_a_speed_index_the_raw_times_compare() -> None:
    assert _fastest_at_one_speed([_m(10.0), _m(9.0, 1.0)]).fast_ms == 9.0
    assert _fastest_at_one_speed([_m(9.0, 1.0), _m(9.5)]).fast_ms == 9.0

"""bench.predictor keeps, per point, the faster of its passes at one machine speed."""

from __future__ import annotations

from bench.predictor import _faster
from infless.profiler.operators import Measurement


def _m(fast_ms: float, ref_ms: float = 0.0) -> Measurement:
    return Measurement(fast_ms, fast_ms, fast_ms, 0.0, 3, fast_ms, ref_ms)


def test_the_first_pass_is_kept_until_there_is_another() -> None:
    first = _m(10.0, 1.0)
    assert _faster(None, first) is first


def test_passes_compare_at_one_machine_speed() -> None:
    slow_machine = _m(12.0, 1.5)  # 8 ms at the kept pass's speed
    kept = _m(10.0, 1.0)
    assert _faster(kept, slow_machine) is slow_machine
    contended = _m(12.0, 1.0)  # same speed, just slower: a neighbour, not the machine
    assert _faster(kept, contended) is kept


def test_without_a_speed_index_the_raw_times_compare() -> None:
    kept, new = _m(10.0), _m(9.0, 1.0)
    assert _faster(kept, new) is new
    assert _faster(new, _m(9.5)) is new

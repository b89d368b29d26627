"""Equation 1: the paper's example, the reference code's vector, roundings and feasibility."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from infless.scaling.bounds import exec_budget_ms, rate_bounds
from infless.scaling.config import Rounding

ROUNDINGS: list[Rounding] = ["paper", "reference", "exact"]


def test_paper_example_slo_200_exec_50_batch_4() -> None:
    bounds = rate_bounds(4, 50.0, 200.0)
    assert (bounds.r_low_rps, bounds.r_up_rps) == (28.0, 80.0)
    assert bounds.batch_timeout_ms == 150.0
    assert bounds.feasible


def test_reference_vector_resnet50_slo_300_batch_4() -> None:
    # reference-implementations.md §1.5: t = 112.5 ms -> r_up 35, r_low 21, timeout 187,000 µs
    bounds = rate_bounds(4, 112.5, 300.0, rounding="reference")
    assert (bounds.r_up_rps, bounds.r_low_rps) == (35.0, 21.0)
    assert bounds.batch_timeout_ms * 1000 == 187_000


def test_paper_rounding_of_the_reference_vector_floors_then_multiplies() -> None:
    bounds = rate_bounds(4, 112.5, 300.0, rounding="paper")
    assert (bounds.r_low_rps, bounds.r_up_rps) == (24.0, 32.0)  # ⌈5.33⌉·4, ⌊8.89⌋·4
    assert bounds.batch_timeout_ms == 187.5


def test_exact_rounding() -> None:
    bounds = rate_bounds(4, 112.5, 300.0, rounding="exact")
    assert bounds.r_up_rps == pytest.approx(4000 / 112.5)
    assert bounds.r_low_rps == pytest.approx(4000 / 187.5)


def test_batch_one_needs_only_the_slo_and_has_no_timeout() -> None:
    bounds = rate_bounds(1, 150.0, 200.0)  # beyond slo/2 is fine for b = 1
    assert bounds.feasible
    assert bounds.r_up_rps == 6.0
    assert bounds.r_low_rps == 1.0
    assert bounds.batch_timeout_ms == 0.0
    assert not rate_bounds(1, 201.0, 200.0).feasible


def test_batch_above_one_needs_half_the_slo() -> None:
    assert rate_bounds(8, 100.0, 200.0).feasible
    assert not rate_bounds(8, 100.5, 200.0).feasible
    assert exec_budget_ms(8, 200.0) == 100.0
    assert exec_budget_ms(1, 200.0) == 200.0


def test_rounding_can_make_a_half_slo_config_infeasible() -> None:
    # t = 400 ms, SLO 800: ⌊2.5⌋·2 = 4 < ⌈2.5⌉·2 = 6
    bounds = rate_bounds(2, 400.0, 800.0)
    assert bounds.r_low_rps > bounds.r_up_rps
    assert not bounds.feasible


def test_exec_beyond_the_slo_has_an_infinite_lower_bound() -> None:
    bounds = rate_bounds(4, 300.0, 200.0)
    assert math.isinf(bounds.r_low_rps)
    assert not bounds.feasible


def test_invalid_arguments_name_the_field() -> None:
    with pytest.raises(ValueError, match="batch_size"):
        rate_bounds(0, 10.0, 100.0)
    with pytest.raises(ValueError, match="exec_ms"):
        rate_bounds(2, 0.0, 100.0)


@given(
    b=st.sampled_from([1, 2, 4, 8, 16, 32]),
    exec_ms=st.floats(0.5, 500.0),
    slo_ms=st.floats(5.0, 2000.0),
    rounding=st.sampled_from(ROUNDINGS),
)
def test_feasible_bounds_are_ordered_and_within_the_budget(
    b: int, exec_ms: float, slo_ms: float, rounding: Rounding
) -> None:
    bounds = rate_bounds(b, exec_ms, slo_ms, rounding)
    if bounds.feasible:
        assert 0 <= bounds.r_low_rps <= bounds.r_up_rps
        assert exec_ms <= exec_budget_ms(b, slo_ms)
        # a batch arriving at r_up is never produced faster than the worker runs it
        assert bounds.r_up_rps <= b * 1000.0 / exec_ms + 1e-6
        # the timeout plus the execution fits the SLO
        assert bounds.batch_timeout_ms + exec_ms <= slo_ms + 1e-6

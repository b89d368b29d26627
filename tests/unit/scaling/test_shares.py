"""§3.2 dispatch shares: the three regimes, releases below the band, and the share bounds."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from infless.scaling.shares import (
    Regime,
    ShareDecision,
    ShareInput,
    band_floor_rps,
    choose_releases,
    dispatch_shares,
    regime_of,
)

A = ShareInput("a", 28.0, 80.0)  # the paper's instance: SLO 200, t_exec 50, b = 4
B = ShareInput("b", 10.0, 40.0)


def shares_of(decision: ShareDecision) -> dict[str, float]:
    return {s.instance_id: s.share_rps for s in decision.shares}


def test_above_r_max_everyone_at_r_up_and_the_residual_is_reported() -> None:
    decision = dispatch_shares([A, B], 150.0)
    assert decision.regime is Regime.ABOVE
    assert shares_of(decision) == {"a": 80.0, "b": 40.0}
    assert decision.residual_rps == pytest.approx(30.0)
    assert decision.release == ()


def test_in_the_band_the_paper_formula_splits_the_demand() -> None:
    # R_max = 120, R_min = 38; band floor = 38 + 0.8·82 = 103.6
    decision = dispatch_shares([A, B], 110.0)
    assert decision.regime is Regime.BAND
    fraction = (120.0 - 110.0) / (120.0 - 38.0)
    expected = {"a": 80.0 - fraction * 52.0, "b": 40.0 - fraction * 30.0}
    assert shares_of(decision) == pytest.approx(expected)
    assert sum(shares_of(decision).values()) == pytest.approx(110.0)
    assert decision.residual_rps == 0.0


def test_band_edges_follow_alpha() -> None:
    assert band_floor_rps(38.0, 120.0, 0.8) == pytest.approx(103.6)
    assert regime_of(103.6, 38.0, 120.0, 0.8) is Regime.BAND
    assert regime_of(103.0, 38.0, 120.0, 0.8) is Regime.BELOW
    assert regime_of(120.0, 38.0, 120.0, 0.8) is Regime.BAND
    assert regime_of(120.5, 38.0, 120.0, 0.8) is Regime.ABOVE
    # the §3.2 text's reading is alpha = 0.2: floor = 0.2·R_max + 0.8·R_min... as R_min + 0.2 span
    assert band_floor_rps(38.0, 120.0, 0.2) == pytest.approx(38.0 + 0.2 * 82.0)
    assert regime_of(5.0, 0.0, 0.0, 0.8) is Regime.IDLE


def test_below_the_band_releases_and_recomputes() -> None:
    # 50 RPS: keeping only A (R_max 80, floor 28 + 0.8·52 = 69.6) is still below; keeping
    # only B breaks cover (40 < 50); so B goes and A stays.
    decision = dispatch_shares([A, B], 50.0)
    assert decision.release == ("b",)
    assert set(shares_of(decision)) == {"a"}
    assert decision.r_max_rps == 80.0
    assert decision.regime is Regime.BELOW  # as close as cover allows
    assert shares_of(decision)["a"] == pytest.approx(50.0)


def test_release_lands_in_the_band_when_possible() -> None:
    instances = [ShareInput(f"i{k}", 10.0, 50.0) for k in range(4)]  # R_max 200
    decision = dispatch_shares(instances, 90.0)
    assert len(decision.release) == 2  # 2 left: R_max 100, floor 10·2 + 0.8·80 = 84 ≤ 90
    assert decision.regime is Regime.BAND
    assert sum(shares_of(decision).values()) == pytest.approx(90.0)


def test_release_never_breaks_cover_or_min_keep() -> None:
    instances = [ShareInput(f"i{k}", 10.0, 50.0) for k in range(4)]
    assert choose_releases(instances, 90.0, 0.8, cover_rps=99.0) == ("i0", "i1")
    assert choose_releases(instances, 90.0, 0.8, cover_rps=101.0) == ("i0",)
    assert choose_releases(instances, 10.0, 0.8, min_keep=3) == ("i0",)
    pinned = [ShareInput(k, 10.0, 50.0, releasable=False) for k in "xyz"]
    assert choose_releases(pinned, 1.0, 0.8) == ()


def test_release_prefers_the_lowest_rank_and_avoids_leaving_underfed_instances() -> None:
    big = ShareInput("big", 150.0, 400.0, release_rank=5.0)
    small = ShareInput("small", 1.0, 120.0, release_rank=1.0)
    other = ShareInput("other", 1.0, 120.0, release_rank=2.0)
    # 100 RPS: releasing big leaves small + other (R_min 2, cover 240) - not underfed
    assert choose_releases([big, small, other], 100.0, 0.8)[0] == "big"
    # 450 RPS: big must stay (cover); the lowest rank goes first, and one release lands in
    # the band (Σ w = 0.8·520 + 0.2·151 = 446.2 ≤ 450)
    assert choose_releases([big, small, other], 450.0, 0.8) == ("small",)
    # 300 RPS: both small ones go, big stays for cover
    assert choose_releases([big, small, other], 300.0, 0.8) == ("small", "other")


def test_zero_demand_releases_everything_unless_kept() -> None:
    assert dispatch_shares([A, B], 0.0).release == ("a", "b")  # equal ranks: larger first
    assert dispatch_shares([A, B], 0.0).regime is Regime.IDLE
    kept = dispatch_shares([A, B], 0.0, min_keep=1)
    assert len(kept.release) == 1
    assert kept.shares[0].share_rps == kept.shares[0].r_low_rps  # clamped, weight only


def test_no_instances_is_idle_with_the_whole_demand_as_residual() -> None:
    decision = dispatch_shares([], 42.0)
    assert decision.regime is Regime.IDLE
    assert decision.residual_rps == 42.0


instance_strategy = st.builds(
    lambda i, low, span: ShareInput(f"i{i}", low, low + span),
    st.integers(0, 10_000),
    st.floats(0.0, 500.0),
    st.floats(0.0, 1000.0),
)


@given(
    st.lists(instance_strategy, min_size=1, max_size=12, unique_by=lambda s: s.instance_id),
    st.floats(0.0, 10_000.0),
    st.floats(0.0, 1.0),
    st.integers(0, 3),
)
def test_every_share_stays_within_its_bounds(
    instances: list[ShareInput], demand_rps: float, alpha: float, min_keep: int
) -> None:
    decision = dispatch_shares(instances, demand_rps, alpha, min_keep)
    for share in decision.shares:
        assert share.r_low_rps - 1e-6 <= share.share_rps <= share.r_up_rps + 1e-6
    kept = {s.instance_id for s in decision.shares}
    assert kept.isdisjoint(decision.release)
    assert len(kept) + len(decision.release) == len(instances) or decision.regime is Regime.IDLE
    if decision.release:  # releases never break cover
        assert sum(s.r_up_rps for s in decision.shares) + 1e-6 >= demand_rps
        assert len(kept) >= min(min_keep, len(instances))
    if decision.regime is Regime.BAND:
        assert sum(s.share_rps for s in decision.shares) == pytest.approx(
            demand_rps, rel=1e-6, abs=1e-6
        )
    if decision.regime is Regime.ABOVE:
        assert decision.residual_rps == pytest.approx(demand_rps - decision.r_max_rps)


def test_an_instance_that_serves_nothing_is_released_before_one_that_serves() -> None:
    """Kept to keep one warm, an instance with [0, 0] (unpriced or over its SLO) would serve
    nothing: the one released is it."""
    dead, live = ShareInput("dead", 0.0, 0.0), ShareInput("live", 1.0, 1.0)
    decision = dispatch_shares([dead, live], 0.0, alpha=0.0, min_keep=1)
    assert decision.release == ("dead",)
    assert [s.instance_id for s in decision.shares] == ["live"]

"""Histogram maths: bins and out-of-bounds, percentiles -> windows, margins, CV, ARIMA branch."""

from __future__ import annotations

from typing import Any

import pytest

from infless.coldstart.config import HistogramConfig
from infless.coldstart.histogram import (
    Branch,
    Histogram,
    bin_of,
    hhp_windows,
    histogram_branch_windows,
    is_representative,
)

CFG = HistogramConfig()  # 240 one-minute bins, 5th/99th pct, 10 % margins, CV >= 2, >= 10 ITs


def hist(bins: dict[int, int], oob_its_s: tuple[float, ...] = ()) -> Histogram:
    h = Histogram.empty(CFG.range_bins)
    for b, times in bins.items():
        h = h.add(b * 60.0 + 1.0, CFG.bin_s, times)
    for it_s in oob_its_s:
        h = h.add(it_s, CFG.bin_s)
    return h


def decide(h: Histogram, cfg: HistogramConfig = CFG) -> tuple[float, float, Branch]:
    pw, ka, branch = hhp_windows(h.stats(cfg.head_q, cfg.tail_q), cfg)
    return float(pw[0]), float(ka[0]), Branch(int(branch[0]))


def test_bins_are_whole_minutes_and_the_range_end_is_out_of_bounds() -> None:
    assert bin_of(59.999, 60.0) == 0
    assert bin_of(60.0, 60.0) == 1
    assert bin_of(-3.0, 60.0) == 0
    h = Histogram.empty(240).add(14_399.0, 60.0).add(14_400.0, 60.0).add(20_000.0, 60.0)
    assert h.counts[239] == 1
    assert h.in_range == 1
    assert (h.oob_count, h.oob_sum_s) == (2, 34_400.0)


def test_removing_more_than_was_added_is_an_error() -> None:
    with pytest.raises(ValueError, match="bin 3"):
        Histogram.empty(240).add(200.0, 60.0, -1)


def test_head_and_tail_bins_are_the_first_bins_reaching_5_and_99_percent() -> None:
    stats = hist({2: 5, 10: 94, 50: 1}).stats(0.05, 0.99)
    assert (int(stats.head_bin[0]), int(stats.tail_bin[0])) == (2, 10)
    stats = hist({2: 4, 10: 94, 50: 2}).stats(0.05, 0.99)
    assert (int(stats.head_bin[0]), int(stats.tail_bin[0])) == (10, 50)


def test_windows_use_head_rounded_down_and_tail_rounded_up_with_10_percent_margins() -> None:
    pw, ka, branch = decide(hist({20: 30}))
    assert branch is Branch.HISTOGRAM
    assert pw == pytest.approx(0.9 * 20 * 60)  # pre-warm: head bin start, 10 % earlier
    assert pw + ka == pytest.approx(1.1 * 21 * 60)  # alive until tail bin end, 10 % later


def test_without_margins_the_windows_are_the_bin_edges() -> None:
    cfg = HistogramConfig(margin=0.0)
    pw, ka, _ = decide(hist({5: 20, 8: 10}), cfg)
    assert (pw, pw + ka) == pytest.approx((5 * 60, 9 * 60))


def test_head_in_bin_zero_means_no_unloading() -> None:
    pw, ka, branch = decide(hist({0: 40, 3: 2}))
    assert branch is Branch.HISTOGRAM
    assert pw == 0.0
    assert ka == pytest.approx(1.1 * 4 * 60)


def test_cv_threshold_is_two_on_bin_counts() -> None:
    # N ITs spread evenly over n bins: CV^2 = 240 / n - 1, so CV >= 2 iff n <= 48.
    even_48 = hist(dict.fromkeys(range(1, 49), 1))
    even_49 = hist(dict.fromkeys(range(1, 50), 1))
    assert bool(is_representative(even_48.stats(0.05, 0.99), CFG)[0])
    assert not bool(is_representative(even_49.stats(0.05, 0.99), CFG)[0])
    assert decide(even_49) == (0.0, 240 * 60.0, Branch.STANDARD)


def test_too_few_idle_times_fall_back_to_the_standard_keep_alive() -> None:
    assert decide(hist({30: 9})) == (0.0, 14_400.0, Branch.STANDARD)
    assert decide(hist({30: 10}))[2] is Branch.HISTOGRAM
    assert decide(Histogram.empty(240)) == (0.0, 14_400.0, Branch.STANDARD)


def test_standard_keep_alive_follows_the_range() -> None:
    cfg = HistogramConfig(range_min=60)
    h = Histogram.empty(cfg.range_bins).add(120.0, 60.0)
    pw, ka, _ = hhp_windows(h.stats(0.05, 0.99), cfg)
    assert (float(pw[0]), float(ka[0])) == (0.0, 3600.0)


def test_out_of_bounds_majority_takes_the_arima_branch_on_the_mean_long_idle_time() -> None:
    h = hist({10: 2}, oob_its_s=(18_000.0, 16_000.0, 20_000.0))  # 3 of 5 ITs out of bounds
    pw, ka, branch = decide(h)
    assert branch is Branch.ARIMA
    assert pw == pytest.approx(0.85 * 18_000.0)
    assert pw + ka == pytest.approx(1.15 * 18_000.0)


def test_out_of_bounds_threshold_is_inclusive_and_a_minority_is_ignored() -> None:
    assert decide(hist({10: 2}, oob_its_s=(18_000.0, 18_000.0)))[2] is Branch.ARIMA
    minority = hist({10: 12}, oob_its_s=(18_000.0,) * 11)
    pw, ka, branch = decide(minority)
    assert branch is Branch.HISTOGRAM
    assert (pw, pw + ka) == pytest.approx((0.9 * 10 * 60, 1.1 * 11 * 60))


def test_keep_alive_is_at_least_one_bin() -> None:
    stats = hist({0: 50}).stats(0.05, 0.99)
    _, ka = histogram_branch_windows(stats, HistogramConfig(margin=0.0))
    assert float(ka[0]) == 60.0


@pytest.mark.parametrize(
    ("field", "value"),
    [("range_min", 0), ("bin_s", 0.0), ("margin", 1.0), ("head_q", 0.995), ("min_its", 0)],
)
def test_invalid_config_names_the_field(field: str, value: float) -> None:
    params: dict[str, Any] = {field: value}
    with pytest.raises(ValueError, match=field):
        HistogramConfig(**params)

"""Capacity factors: a variant's measured service time against its profile, and the host
factor the variants not running are judged by; the host's tail stretch."""

from __future__ import annotations

from dataclasses import replace

import pytest

from infless.modelless.capacity import HIGHEST, Capacity, ServiceTimes, next_capacity, observed
from infless.modelless.config import ModellessConfig
from infless.modelless.states import WindowLoad

CFG = ModellessConfig(capacity_min_batches=5, capacity_recovery=0.1)


def window(batches: int, service_ms: float, profiled_ms: float = 10.0) -> WindowLoad:
    return WindowLoad(
        replicas=1,
        batch_size=4,
        profiled_ms=profiled_ms,
        window_s=1.0,
        completed=4 * batches,
        batches=batches,
        service_ms=service_ms,
    )


def test_observed_is_profiled_over_measured_per_batch() -> None:
    assert observed(window(10, 200.0), 5) == pytest.approx(0.5)  # 20 ms a batch vs 10
    assert observed(window(4, 80.0), 5) is None  # too few batches to say
    assert observed(window(10, 1.0), 5) == HIGHEST  # bounded


def test_a_slow_variant_lowers_its_own_factor_and_the_host_one() -> None:
    got = next_capacity(Capacity(), {"fp32": window(10, 200.0)}, CFG)
    assert got.own == {"fp32": pytest.approx(0.75)}  # half-way from 1 to 0.5
    assert got.host == pytest.approx(0.75)
    # a variant never measured meets the host's contention
    assert got.factor("int8") == pytest.approx(0.75)
    again = next_capacity(got, {"fp32": window(10, 200.0)}, CFG)
    assert again.factor("fp32") == pytest.approx(0.625)


def test_the_host_factor_weighs_variants_by_batches() -> None:
    windows = {"fp32": window(30, 600.0), "int8": window(10, 100.0)}  # 0.5 and 1.0
    got = next_capacity(Capacity(), windows, CFG)
    assert got.host == pytest.approx(0.5 * 1.0 + 0.5 * (0.5 * 30 + 1.0 * 10) / 40)


def test_a_variant_at_capacity_counts_the_time_it_sustains() -> None:
    # as fast as profiled per batch (10 ms), but two replicas served only 50 batches in the
    # window while refusing a third of the arrivals: busy 0.5 s of their 2 replica-seconds
    busy = replace(window(50, 500.0), replicas=2, completed=200, refused=100)
    got = next_capacity(Capacity(), {"bf16": busy}, CFG)
    assert got.factor("bf16") == pytest.approx(0.5 * 1.0 + 0.5 * 0.25)
    # the gaps between batches are the host's (the gateway's) as much as bf16's: a variant
    # not running is judged by them too, else the one measured would always look worse
    assert got.host == pytest.approx(0.625)
    assert got.factor("int8") == pytest.approx(0.625)
    # nor while a replica was starting or stopping
    changing = replace(busy, stable=False)
    assert next_capacity(Capacity(), {"bf16": changing}, CFG).factor("bf16") == 1.0
    # a burst's few refusals at a low rate say nothing about its capacity
    burst = replace(busy, refused=5)
    assert next_capacity(Capacity(), {"bf16": burst}, CFG).factor("bf16") == 1.0


def test_an_unmeasured_variant_drifts_towards_the_host() -> None:
    prev = Capacity(host=0.5, own={"bf16": 1.0})
    got = next_capacity(prev, {"bf16": window(0, 0.0)}, CFG)
    assert got.own["bf16"] == pytest.approx(1.0 - 0.5 * 0.1)
    assert got.host == 0.5  # nothing measured: the host stays


def one_at_a_time(p99_ms: float | None, answers: int = 20) -> WindowLoad:
    """A window of batch-1 service at the profiled 10 ms, answering `answers` queries."""
    return WindowLoad(
        replicas=1,
        batch_size=1,
        profiled_ms=10.0,
        window_s=1.0,
        completed=answers,
        batches=answers,
        service_ms=10.0 * answers,
        p99_ms=p99_ms,
    )


def test_the_tail_stretch_is_the_p99_over_the_forward_time_at_the_factor() -> None:
    got = next_capacity(Capacity(), {"bf16": one_at_a_time(25.0)}, CFG)
    assert got.tail_ratio == pytest.approx(2.5)  # the first measurement, as it is
    # at half its profiled speed the forward time is 20 ms: the host stretched it 1.25x
    slow = Capacity(host=0.5, own={"bf16": 0.5})
    got = next_capacity(slow, {"bf16": replace(one_at_a_time(25.0), service_ms=400.0)}, CFG)
    assert got.factor("bf16") == pytest.approx(0.5)
    assert got.tail_ratio == pytest.approx(1.25)
    # never below 1 (a p99 under the profile is the profile)
    assert next_capacity(Capacity(), {"bf16": one_at_a_time(5.0)}, CFG).tail_ratio == 1.0


def test_the_tail_stretch_averages_by_answers_into_the_running_figure() -> None:
    windows = {"fp32": one_at_a_time(30.0, answers=30), "bf16": one_at_a_time(20.0, answers=10)}
    got = next_capacity(Capacity(tail_ratio=1.0), windows, CFG)
    assert got.tail_ratio == pytest.approx(0.5 * 1.0 + 0.5 * (3.0 * 30 + 2.0 * 10) / 40)


def test_batching_windows_and_windows_without_a_p99_do_not_measure_the_tail() -> None:
    # a batching instance waits for its batch on purpose: its p99 is not the host's
    assert next_capacity(Capacity(), {"fp32": window(10, 100.0)}, CFG).tail_ratio is None
    batching = replace(window(10, 100.0), p99_ms=45.0)
    assert next_capacity(Capacity(), {"fp32": batching}, CFG).tail_ratio is None
    assert next_capacity(Capacity(), {"fp32": one_at_a_time(None)}, CFG).tail_ratio is None


def test_an_unmeasured_tail_comes_back_towards_the_profile() -> None:
    got = next_capacity(Capacity(tail_ratio=3.0), {"fp32": one_at_a_time(None)}, CFG)
    assert got.tail_ratio == pytest.approx(3.0 - 0.1 * 2.0)  # capacity_recovery of the way


def test_the_batches_tail_averages_the_instances_ratios_by_batches() -> None:
    """The data plane judges a batch at its tail (its mean times the tail ratio its
    instances measured); the capacity follows that ratio, weighed by batches served."""
    fp32 = replace(window(30, 600.0), tail_ratio=1.4)
    bf16 = replace(window(10, 100.0), tail_ratio=1.0)
    first = next_capacity(Capacity(), {"fp32": fp32, "bf16": bf16}, CFG)
    assert first.batch_tail == pytest.approx((1.4 * 30 + 1.0 * 10) / 40)  # taken as it is
    again = next_capacity(first, {"fp32": replace(fp32, tail_ratio=1.1)}, CFG)
    assert again.batch_tail == pytest.approx(0.5 * first.batch_stretch + 0.5 * 1.1)


def test_instances_in_their_warm_in_measure_neither_the_tail_nor_the_times() -> None:
    fresh = replace(window(10, 100.0), tail_ratio=4.9, service_ms_by_batch={1: 23.0}, warming=True)
    got = next_capacity(Capacity(), {"bf16": fresh}, CFG)
    assert got.batch_tail is None
    assert got.service == {}


def test_without_a_measured_batch_tail_the_profile_counts_as_it_is() -> None:
    assert Capacity().batch_stretch == 1.0
    unmeasured = next_capacity(Capacity(), {"fp32": window(10, 100.0)}, CFG)
    assert unmeasured.batch_tail is None
    # a window with no measurement (idle, or no instance measured one) keeps the figure
    kept = next_capacity(Capacity(batch_tail=1.3), {"fp32": window(0, 0.0)}, CFG)
    assert kept.batch_tail == pytest.approx(1.3)


def test_a_running_variants_measured_service_times_are_kept_until_it_stops() -> None:
    measured = replace(window(10, 100.0), service_ms_by_batch={1: 5.0, 4: 30.0})
    got = next_capacity(Capacity(), {"fp32": measured}, CFG)
    assert got.service == {"fp32": ServiceTimes(1, {1: 5.0, 4: 30.0})}
    # a window without a new table (its instances serve on): kept
    kept = next_capacity(got, {"fp32": window(10, 100.0)}, CFG)
    assert kept.service == got.service
    # no ready instance left: judged by its profile again
    gone = next_capacity(got, {"fp32": replace(window(0, 0.0), replicas=0)}, CFG)
    assert gone.service == {}


def test_measured_times_count_only_at_the_cards_core_count() -> None:
    from infless.modelless.cards import card_for
    from tests.unit.modelless.support import profile

    card = card_for(profile("fp32", 1.0, 4.0, 2.0), slo_ms=50.0)
    assert card is not None
    assert card.cpus == 1
    on_one = Capacity(service={"fp32": ServiceTimes(1, {8: 40.0})})
    on_two = Capacity(service={"fp32": ServiceTimes(2, {8: 40.0})})
    assert on_one.measured(card) == {8: 40.0}
    assert on_two.measured(card) is None


def test_a_config_out_of_range_is_refused() -> None:
    from infless.modelless.config import check_modelless

    assert check_modelless(CFG) == []
    assert check_modelless(ModellessConfig(capacity_min_batches=0))
    assert check_modelless(ModellessConfig(capacity_recovery=1.5))
    problems = check_modelless(ModellessConfig(tail_share=0.0))
    assert problems == [
        "[modelless]: tail_share must be in (0, 1] (got 0.0); 0.7 keeps 30 % of the SLO as headroom"
    ]

"""Pure batching decisions: feasibility (INFless AvailableConfig), batch size, timeout."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from infless.dataplane.policy import (
    batch_timeout_s,
    choose_batch_size,
    dispatch_due,
    feasible,
    powers_of_two_up_to,
    queue_capacity,
    settle,
    update_exec_ms,
)


def test_feasibility_is_slo_for_single_requests_and_half_slo_for_batches() -> None:
    assert feasible(1, 49.0, 50.0)
    assert not feasible(1, 51.0, 50.0)
    assert feasible(4, 25.0, 50.0)
    assert not feasible(4, 25.5, 50.0)


def test_largest_feasible_batch_within_the_label_limit_is_chosen() -> None:
    exec_ms = {1: 3.0, 2: 5.0, 4: 9.0, 8: 20.0, 16: 41.0}
    assert choose_batch_size(exec_ms, slo_ms=50.0, max_batch=16) == 8
    assert choose_batch_size(exec_ms, slo_ms=100.0, max_batch=16) == 16
    assert choose_batch_size(exec_ms, slo_ms=100.0, max_batch=4) == 4


def test_no_feasible_batch_falls_back_to_one() -> None:
    assert choose_batch_size({1: 80.0, 2: 150.0}, slo_ms=50.0, max_batch=8) == 1


def test_timeout_is_slo_minus_exec_minus_slack_and_never_negative() -> None:
    assert batch_timeout_s(200.0, 50.0, 0.0) == 0.15
    assert abs(batch_timeout_s(50.0, 12.0, 3.0) - 0.035) < 1e-12
    assert batch_timeout_s(50.0, 60.0, 3.0) == 0.0


def test_settle_combines_size_timeout_and_capacity() -> None:
    settings = settle(
        {1: 2.0, 2: 3.0, 4: 5.0}, slo_ms=50.0, max_batch=4, slack_ms=1.0, capacity_batches=3
    )
    assert settings.batch_size == 4
    assert settings.capacity == 36  # 3 batches configured, but 9 finish within 50 ms
    assert abs(settings.timeout_s - 0.044) < 1e-12
    assert settings.exec_ms == 5.0


def test_settle_keeps_a_fixed_batch_size_even_when_a_larger_one_is_feasible() -> None:
    settings = settle(
        {1: 2.0, 2: 3.0, 4: 5.0},
        slo_ms=50.0,
        max_batch=4,
        slack_ms=1.0,
        capacity_batches=3,
        batch_size=2,
    )
    assert settings.batch_size == 2
    assert settings.exec_ms == 3.0
    assert abs(settings.timeout_s - 0.046) < 1e-12


def test_queue_holds_the_configured_batches_or_more_while_they_finish_within_the_slo() -> None:
    # 50 ms SLO, 5 ms a batch: 9 batches can wait behind the running one (10 x 5 ms = 50 ms)
    assert queue_capacity(1, 5.0, 50.0, min_batches=4) == 9
    assert queue_capacity(4, 5.0, 50.0, min_batches=4) == 36
    # slow batches: the configured bound still absorbs a burst
    assert queue_capacity(8, 25.0, 50.0, min_batches=4) == 32
    assert queue_capacity(8, 60.0, 50.0, min_batches=2) == 16
    assert queue_capacity(2, 5.0, 50.0, min_batches=12) == 24
    # t_exec unknown: the configured bound
    assert queue_capacity(2, 0.0, 50.0, min_batches=4) == 8


@given(
    batch=st.integers(1, 32),
    exec_ms=st.floats(0.1, 500.0),
    slo_ms=st.floats(1.0, 1000.0),
    min_batches=st.integers(1, 32),
)
def test_queue_bound_is_whole_batches_and_never_below_the_configured_one(
    batch: int, exec_ms: float, slo_ms: float, min_batches: int
) -> None:
    capacity = queue_capacity(batch, exec_ms, slo_ms, min_batches)
    assert capacity % batch == 0
    assert capacity >= batch * min_batches
    if capacity > batch * min_batches:  # extended: the last queued request is still in time
        assert (capacity // batch + 1) * exec_ms <= slo_ms + 1e-9


def test_exec_time_average_starts_at_the_first_sample_and_follows_new_ones() -> None:
    assert update_exec_ms(None, 12.0) == 12.0
    assert update_exec_ms(10.0, 20.0, weight=0.1) == 11.0
    value = 10.0
    for _ in range(60):
        value = update_exec_ms(value, 30.0)
    assert 29.0 < value < 30.0


def test_powers_of_two_include_the_limit() -> None:
    assert powers_of_two_up_to(8) == [1, 2, 4, 8]
    assert powers_of_two_up_to(12) == [1, 2, 4, 8, 12]
    assert powers_of_two_up_to(1) == [1]


@given(
    length=st.integers(0, 64),
    batch=st.integers(1, 32),
    waited=st.floats(0, 1),
    timeout=st.floats(0, 1),
)
def test_dispatch_due_exactly_when_full_or_expired(
    length: int, batch: int, waited: float, timeout: float
) -> None:
    due = dispatch_due(length, batch, oldest_arrival_s=10.0, timeout_s=timeout, now_s=10.0 + waited)
    expected = length > 0 and (length >= batch or 10.0 + waited >= 10.0 + timeout)
    assert due == expected


def test_dispatch_at_modes() -> None:
    from infless.dataplane.policy import dispatch_at

    assert dispatch_at(0, 4, 10.0, 0.1, "deadline", 0.01) == float("inf")
    assert dispatch_at(4, 4, 10.0, 0.1, "deadline", 0.01) == float("-inf")
    assert dispatch_at(1, 4, 10.0, 0.1, "eager", 0.01) == float("-inf")
    assert dispatch_at(1, 4, 10.0, 0.1, "deadline", 0.01) == 10.1
    assert abs(dispatch_at(1, 4, 10.0, 0.1, "adaptive", 0.02) - 10.04) < 1e-9
    assert dispatch_at(1, 4, 10.0, 0.1, "adaptive", 0.0) == 10.1  # never past the deadline


def test_a_slower_batch_moves_every_size_by_a_share_of_the_change() -> None:
    from infless.dataplane.policy import rescaled_exec_ms

    table = {1: 2.0, 8: 10.0, 32: 30.0}
    after = rescaled_exec_ms(table, 8, 20.0, weight=0.1)  # batch 8 took twice its time
    assert after[8] == 11.0  # its own EWMA
    assert after[1] == 2.0 * 1.1  # the others move by the same share: the host slowed
    assert after[32] == 30.0 * 1.1
    assert table == {1: 2.0, 8: 10.0, 32: 30.0}  # a new table: the old one is untouched
    assert rescaled_exec_ms({1: 2.0}, 4, 9.0) == {1: 2.0, 4: 9.0}  # a new size: its first
    for _ in range(200):  # a host five times slower, seen at batch 1 only
        table = rescaled_exec_ms(table, 1, 10.0)
    assert round(table[1], 6) == 10.0
    assert round(table[32] / 30.0, 3) == round(table[1] / 2.0, 3)  # every size followed

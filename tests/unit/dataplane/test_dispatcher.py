"""Rate-share dispatch: realised shares follow the weights; full instances are skipped."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from infless.dataplane.dispatcher import RateShareDispatcher


@dataclass
class FakeInstance:
    instance_id: str
    share_rps: float
    accepting: bool = True


def test_equal_shares_alternate() -> None:
    dispatcher = RateShareDispatcher()
    a, b = FakeInstance("a", 10), FakeInstance("b", 10)
    picks = [dispatcher.choose([a, b]) for _ in range(6)]
    assert [p.instance_id for p in picks if p] == ["a", "b", "a", "b", "a", "b"]


@given(st.lists(st.integers(1, 50), min_size=1, max_size=6))
def test_realised_counts_follow_shares(weights: list[int]) -> None:
    dispatcher = RateShareDispatcher()
    instances = [FakeInstance(f"i{n}", w) for n, w in enumerate(weights)]
    total = sum(weights)
    rounds = total * 3
    counts = Counter(dispatcher.choose(instances).instance_id for _ in range(rounds))  # type: ignore[union-attr]
    for instance in instances:
        assert abs(counts[instance.instance_id] - 3 * instance.share_rps) <= 1


def test_instances_not_accepting_are_skipped_and_none_when_all_full() -> None:
    dispatcher = RateShareDispatcher()
    a, b = FakeInstance("a", 100), FakeInstance("b", 1, accepting=False)
    assert all(dispatcher.choose([a, b]) is a for _ in range(5))
    a.accepting = False
    assert dispatcher.choose([a, b]) is None

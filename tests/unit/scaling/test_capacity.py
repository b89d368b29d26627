"""The capacity index: best fit by free score, device choice, undo, and a brute-force check."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from infless.scaling.capacity import CapacityIndex
from infless.scaling.view import ServerView


def best(index: CapacityIndex, cpus: int, gpu_pct: int) -> str:
    pos = index.best_fit(cpus, gpu_pct)
    assert pos is not None
    return index.ids[pos]


def test_best_fit_is_the_smallest_free_score_that_fits() -> None:
    index = CapacityIndex(
        [ServerView("a", 16, 16), ServerView("b", 16, 4), ServerView("c", 16, 3)], beta=1.0
    )
    assert best(index, 4, 0) == "b"
    assert best(index, 3, 0) == "c"
    assert best(index, 5, 0) == "a"
    assert index.best_fit(17, 0) is None


def test_cpu_only_instances_prefer_servers_without_free_gpu() -> None:
    index = CapacityIndex(
        [ServerView("gpu", 8, 8, (100,), (100,)), ServerView("cpu", 8, 8)], beta=0.45
    )
    assert best(index, 2, 0) == "cpu"
    assert best(index, 2, 30) == "gpu"


def test_gpu_share_must_fit_one_device_and_the_tightest_device_is_used() -> None:
    index = CapacityIndex([ServerView("g", 8, 8, (100, 100), (40, 60))], beta=0.45)
    assert index.best_fit(1, 70) is None  # 100 % free in total, but no device has 70
    assert index.place(0, 1, 35) == 0  # 40 is the tightest device that fits
    assert index.free_gpu[0] == [5, 60]
    assert index.place(0, 1, 35) == 1
    assert index.best_fit(1, 30) is None


def test_place_and_unplace_round_trip() -> None:
    index = CapacityIndex([ServerView("a", 8, 8, (100,), (100,))], beta=0.5)
    before = index.score(0)
    device = index.place(0, 3, 20)
    assert index.score(0) == pytest.approx(before - 0.5 * 3 - 20)
    index.unplace(0, 3, 20, device)
    assert index.score(0) == pytest.approx(before)
    assert index.best_fit(8, 100) == 0


def test_placing_beyond_capacity_is_refused() -> None:
    index = CapacityIndex([ServerView("a", 4, 2)], beta=1.0)
    with pytest.raises(ValueError, match="cannot fit"):
        index.place(0, 3, 0)


def test_a_core_reserve_keeps_cores_for_the_free_gpus_until_they_are_taken() -> None:
    index = CapacityIndex([ServerView("g", 16, 16, (100, 100), (100, 100))], 0.45, 2)
    assert index.best_fit(15, 0) is None  # 2 cores stay for the GPUs
    assert index.best_fit(14, 0) == 0
    index.place(0, 14, 0)
    assert index.best_fit(1, 0) is None
    index.place(0, 1, 100)  # the reserve is what lets the GPU instances in
    assert index.best_fit(1, 0) is None  # one device still has a free share
    index.place(0, 1, 100)
    assert index.free_cpus[0] == 0
    unreserved = CapacityIndex([ServerView("g", 16, 16, (100, 100), (100, 100))], 0.45)
    unreserved.place(0, 16, 0)
    assert unreserved.best_fit(1, 100) is None  # stranded: every core is taken


def test_the_reserve_is_released_when_the_last_gpu_share_is_taken() -> None:
    index = CapacityIndex([ServerView("g", 8, 8, (100,), (100,))], 0.45, 3)
    assert index.best_fit(6, 0) is None  # 8 free, 3 of them held for the GPU
    index.place(0, 1, 100)
    assert index.best_fit(6, 0) == 0  # 7 free, the GPU taken: nothing held back any more


@given(
    st.lists(
        st.tuples(st.integers(0, 16), st.lists(st.integers(0, 100), max_size=2)),
        min_size=1,
        max_size=40,
    ),
    st.lists(st.tuples(st.integers(1, 8), st.sampled_from([0, 0, 10, 30, 50])), max_size=30),
    st.sampled_from([0, 2]),
)
def test_best_fit_matches_a_brute_force_scan(
    servers: list[tuple[int, list[int]]], requests: list[tuple[int, int]], reserve: int
) -> None:
    views = [
        ServerView(f"s{k}", 16, free, (100,) * len(gpus), tuple(gpus))
        for k, (free, gpus) in enumerate(servers)
    ]
    index = CapacityIndex(views, beta=0.45, gpu_core_reserve=reserve)
    for cpus, gpu_pct in requests:
        fitting = [p for p in range(len(views)) if index.fits(p, cpus, gpu_pct)]
        expected = min(fitting, key=lambda p: (index.score(p), p), default=None)
        found = index.best_fit(cpus, gpu_pct)
        if expected is None:
            assert found is None
            continue
        assert found is not None
        assert index.score(found) == pytest.approx(index.score(expected))
        index.place(found, cpus, gpu_pct)
        assert index.free_cpus[found] >= 0
        assert min(index.free_gpu[found], default=0) >= 0

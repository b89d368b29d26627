"""`CpuAllocator`: least-loaded cores first, and a retiring instance's cores before any
core a live instance runs on."""

from __future__ import annotations

from infless.cluster.cpus import CpuAllocator


def test_instances_spread_over_idle_cores_before_sharing_one() -> None:
    cores = CpuAllocator((0, 1, 2))
    assert [cores.assign(1, w) for w in ("a", "b", "c", "d")] == [(0,), (1,), (2,), (0,)]
    assert cores.load() == {0: 2, 1: 1, 2: 1}


def test_a_retiring_instances_core_is_taken_before_a_live_ones_but_after_an_idle_one() -> None:
    cores = CpuAllocator((0, 1, 2))
    cores.assign(1, "live")  # core 0
    cores.assign(1, "going")  # core 1
    cores.retire("going")
    assert cores.assign(1, "first") == (2,)  # idle
    assert cores.assign(1, "second") == (1,)  # retiring, not live core 0
    assert cores.load() == {0: 1, 1: 2, 2: 1}  # the retiring one still runs there


def test_a_release_frees_an_owners_cores_once() -> None:
    cores = CpuAllocator((0, 1))
    cores.assign(2, "wide")
    cores.retire("wide")
    cores.release("wide")
    cores.release("wide")
    cores.retire("wide")  # gone: nothing to retire
    assert cores.load() == {0: 0, 1: 0}
    assert cores.assign(1, "next") == (0,)
    assert cores.load() == {0: 1, 1: 0}

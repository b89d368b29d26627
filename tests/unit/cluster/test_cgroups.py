"""CPU confinement: detection, a real child confined by cgroup v1 (when writable), the v2
file layout on a fake tree, and the affinity fallback. Every group made here is removed."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from infless.cluster.cgroups import (
    CgroupLayout,
    CpuConfiner,
    allowed_cpus,
    detect_layout,
    format_cpu_list,
    nice_weight,
    parse_cpu_list,
    v2_weight,
)

CORES = sorted(os.sched_getaffinity(0))
REAL = detect_layout()


@pytest.fixture
def child() -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        yield process
    finally:
        if process.poll() is None:
            os.kill(process.pid, 9)
        process.wait()


@pytest.fixture
def confiner() -> Iterator[CpuConfiner]:
    made = CpuConfiner(REAL, parent=f"infless-test-{secrets.token_hex(3)}")
    try:
        yield made
    finally:
        made.remove_parent()
        for root in {REAL.cpuset_root, REAL.cpu_root} - {None}:
            assert root is not None
            assert not (root / made.parent).exists()


def test_cpu_lists_round_trip() -> None:
    assert format_cpu_list([5, 0, 1, 2]) == "0-2,5"
    assert format_cpu_list([3]) == "3"
    assert parse_cpu_list("0-2,5\n") == (0, 1, 2, 5)
    assert parse_cpu_list("") == ()


def test_detects_v2_v1_and_nothing(tmp_path: Path) -> None:
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "cgroup.controllers").write_text("cpuset cpu io memory\n")
    (v2 / "cgroup.subtree_control").write_text("")
    assert detect_layout(v2) == CgroupLayout("v2", v2, v2)
    (v2 / "cgroup.controllers").write_text("io memory\n")
    assert detect_layout(v2).version == "none"
    v1 = tmp_path / "v1"
    (v1 / "cpuset").mkdir(parents=True)
    (v1 / "cpu,cpuacct").mkdir()
    (v1 / "cpuset" / "cpuset.cpus").write_text("0-1\n")
    (v1 / "cpu,cpuacct" / "cpu.cfs_quota_us").write_text("-1\n")
    assert detect_layout(v1) == CgroupLayout("v1", v1 / "cpuset", v1 / "cpu,cpuacct")
    nothing = detect_layout(tmp_path / "missing")
    assert nothing.version == "none"
    assert "no writable cgroup" in nothing.reason


def test_the_parent_weighs_as_a_task_at_the_workers_niceness() -> None:
    assert nice_weight(0) == 1024
    assert nice_weight(10) == 110
    assert v2_weight(0) == 100
    assert v2_weight(10) == 11
    assert v2_weight(19) == 1
    with pytest.raises(ValueError, match="nice = 20"):
        CpuConfiner(CgroupLayout("none"), nice=20)


def test_v2_gives_the_parent_the_workers_weight(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu\n")
    (tmp_path / "cgroup.subtree_control").write_text("")
    (tmp_path / "infless").mkdir()
    (tmp_path / "infless" / "cpu.weight").write_text("10000")  # left high by someone else
    CpuConfiner(detect_layout(tmp_path), parent="infless", nice=10).confine("fn-a", 1, [0])
    assert (tmp_path / "infless" / "cpu.weight").read_text() == "11"


def test_v2_writes_cpuset_quota_and_procs(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu\n")
    (tmp_path / "cgroup.subtree_control").write_text("")
    confiner = CpuConfiner(detect_layout(tmp_path), parent="infless")
    applied = confiner.confine("fn-abc", 4242, [1, 0], cores=1.5)
    group = tmp_path / "infless" / "fn-abc"
    assert applied.method == "cgroup-v2"
    assert (tmp_path / "cgroup.subtree_control").read_text() == "+cpu +cpuset"
    assert (tmp_path / "infless" / "cgroup.subtree_control").read_text() == "+cpu +cpuset"
    assert (group / "cpuset.cpus").read_text() == "0-1"
    assert (group / "cpu.max").read_text() == "150000 100000"
    assert (group / "cgroup.procs").read_text() == "4242"
    assert applied.describe()["cpu_quota_cores"] == 1.5
    assert applied.groups == (str(group),)


@pytest.mark.skipif(REAL.version != "v1", reason=f"needs writable cgroup v1 ({REAL.reason})")
def test_a_real_child_is_confined_by_cgroup_v1_and_the_group_removed(
    child: subprocess.Popen[bytes], confiner: CpuConfiner
) -> None:
    core = CORES[-1]
    applied = confiner.confine("fn-one", child.pid, [core], cores=0.5)
    try:
        assert applied.method == "cgroup-v1"
        assert allowed_cpus(child.pid) == (core,)
        cpuset_group, cpu_group = (Path(p) for p in applied.groups)
        assert (cpuset_group / "cpuset.cpus").read_text().strip() == str(core)
        assert str(child.pid) in (cpuset_group / "cgroup.procs").read_text().split()
        assert (cpu_group / "cpu.cfs_quota_us").read_text().strip() == "50000"
        assert (cpu_group / "cpu.cfs_period_us").read_text().strip() == "100000"
        assert applied.describe() == {
            "method": "cgroup-v1",
            "cpuset": str(core),
            "cpu_quota_us": 50000,
            "cpu_period_us": 100000,
            "cpu_quota_cores": 0.5,
            "note": "",
        }
    finally:
        os.kill(child.pid, 9)
        child.wait()
        confiner.release(applied)
    assert not any(Path(p).exists() for p in applied.groups)


@pytest.mark.skipif(REAL.version != "v1", reason=f"needs writable cgroup v1 ({REAL.reason})")
def test_a_real_parent_group_weighs_as_the_workers_niceness(
    child: subprocess.Popen[bytes],
) -> None:
    """The kernel schedules the parent group against the gateway: its `cpu.shares` is the
    weight of a task at the workers' niceness, whatever it held before."""
    confiner = CpuConfiner(REAL, parent=f"infless-test-{secrets.token_hex(3)}", nice=10)
    assert REAL.cpu_root is not None
    shares = REAL.cpu_root / confiner.parent / "cpu.shares"
    second = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    applied = [confiner.confine("fn-one", child.pid, [CORES[-1]])]
    try:
        assert shares.read_text().strip() == "110"
        shares.write_text("16384")  # a weight left high: the next start sets it again
        applied.append(confiner.confine("fn-two", second.pid, [CORES[-1]]))
        assert shares.read_text().strip() == "110"
    finally:
        for process in (child, second):
            os.kill(process.pid, 9)
            process.wait()
        for confinement in applied:
            confiner.release(confinement)
        confiner.remove_parent()


@pytest.mark.skipif(REAL.version != "v1", reason=f"needs writable cgroup v1 ({REAL.reason})")
def test_two_instances_get_different_cpusets_and_release_moves_a_live_process_out(
    confiner: CpuConfiner,
) -> None:
    if len(CORES) < 2:
        pytest.skip("needs two cores")
    children = [
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"]) for _ in range(2)
    ]
    applied = []
    try:
        for k, process in enumerate(children):
            applied.append(confiner.confine(f"fn-{k}", process.pid, [CORES[k]]))
        assert [allowed_cpus(p.pid) for p in children] == [(CORES[0],), (CORES[1],)]
        for confinement in applied:  # the processes are still alive: moved to the root
            confiner.release(confinement)
        assert not any(Path(p).exists() for c in applied for p in c.groups)
        assert set(allowed_cpus(children[0].pid)) == set(CORES)
    finally:
        for process in children:
            os.kill(process.pid, 9)
            process.wait()
        for confinement in applied:
            confiner.release(confinement)


def test_without_cgroups_affinity_confines_every_thread(child: subprocess.Popen[bytes]) -> None:
    confiner = CpuConfiner(CgroupLayout("none", reason="test: no cgroups"))
    applied = confiner.confine("fn-aff", child.pid, [CORES[0]])
    assert applied.method == "affinity"
    assert applied.note == "test: no cgroups"
    assert applied.quota_us is None
    assert allowed_cpus(child.pid) == (CORES[0],)
    confiner.release(applied)  # nothing to remove


def test_a_failing_cgroup_write_falls_back_to_affinity(
    tmp_path: Path, child: subprocess.Popen[bytes]
) -> None:
    not_a_dir = tmp_path / "cpuset"
    not_a_dir.write_text("")
    layout = CgroupLayout("v1", not_a_dir, tmp_path / "cpu")
    applied = CpuConfiner(layout).confine("fn-bad", child.pid, [CORES[-1]])
    assert applied.method == "affinity"
    assert "fell back" in applied.note
    assert allowed_cpus(child.pid) == (CORES[-1],)


def test_invalid_requests_name_the_instance() -> None:
    confiner = CpuConfiner(CgroupLayout("none"))
    with pytest.raises(ValueError, match="fn-x"):
        confiner.confine("fn-x", os.getpid(), [])
    with pytest.raises(ValueError, match="cores"):
        confiner.confine("fn-x", os.getpid(), [CORES[0]], cores=0.0)

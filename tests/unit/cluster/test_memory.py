"""Memory limits: where groups go (v1 under our own group, v2 beside the CPU groups), what is
written, how OOM kills are read, and a real kill when this machine's cgroups are writable."""

from __future__ import annotations

import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from infless.cluster.memory import MemoryLayout, MemoryLimiter, detect_memory, format_mib

MiB = 2**20


def _v1_tree(root: Path) -> Path:
    own = root / "memory" / "sessions" / "s1"
    own.mkdir(parents=True)
    for directory in (root / "memory", own):
        (directory / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    return own


def test_v1_groups_nest_under_this_process_own_memory_group(tmp_path: Path) -> None:
    own = _v1_tree(tmp_path)
    proc = tmp_path / "cgroup"
    proc.write_text("5:cpu:/\n4:memory:/sessions/s1\n0::/\n")
    assert detect_memory(tmp_path, proc) == MemoryLayout("v1", own)
    limiter = MemoryLimiter(detect_memory(tmp_path, proc), parent="infless")
    assert limiter.unavailable is None
    (own / "infless" / "w-1").mkdir(parents=True)  # what mkdir would make in cgroupfs
    with pytest.raises(FileExistsError):
        limiter.limit("w-1", 42, 64 * MiB)  # one group per worker process, never shared


def test_v1_limit_writes_the_limit_and_the_pid_and_reads_oom_kills(tmp_path: Path) -> None:
    own = _v1_tree(tmp_path)
    proc = tmp_path / "cgroup"
    proc.write_text("4:memory:/sessions/s1\n")
    limiter = MemoryLimiter(detect_memory(tmp_path, proc), parent="infless")
    limit = limiter.limit("w-2", 4242, 96 * MiB)
    group = own / "infless" / "w-2"
    assert (group / "memory.limit_in_bytes").read_text() == str(96 * MiB)
    assert (group / "cgroup.procs").read_text() == "4242"
    assert limit.describe() == {"limitBytes": 96 * MiB, "group": str(group)}
    assert limiter.oom_kills(limit) == 0  # no memory.oom_control: cannot tell
    (group / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
    assert limiter.oom_kills(limit) == 2


def test_v2_shares_the_worker_cpu_group_and_reads_memory_events(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (tmp_path / "cgroup.subtree_control").write_text("cpu cpuset\n")
    limiter = MemoryLimiter(detect_memory(tmp_path), parent="infless")
    assert limiter.layout == MemoryLayout("v2", tmp_path)
    cpu_group = tmp_path / "infless" / "w-3"
    cpu_group.mkdir(parents=True)  # CpuConfiner put the worker here already
    limit = limiter.limit("w-3", 77, 64 * MiB)
    assert (limit.group, limit.created) == (cpu_group, False)
    assert (cpu_group / "memory.max").read_text() == str(64 * MiB)
    assert not (cpu_group / "cgroup.procs").exists()  # the pid is not moved again
    assert (tmp_path / "infless" / "cgroup.subtree_control").read_text() == "+memory"
    (cpu_group / "memory.events").write_text("low 0\nhigh 0\nmax 9\noom 1\noom_kill 1\n")
    assert limiter.oom_kills(limit) == 1
    limiter.release(limit)  # not its group: CpuConfiner removes it
    assert cpu_group.is_dir()

    own = limiter.limit("w-4", 78, 64 * MiB)  # no CPU group: one of its own
    assert own.created
    assert (own.group / "cgroup.procs").read_text() == "78"


def test_without_a_writable_memory_controller_it_says_why(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu\n")
    (tmp_path / "cgroup.subtree_control").write_text("")
    limiter = MemoryLimiter(detect_memory(tmp_path))
    assert limiter.unavailable == f"cgroup v2 at {tmp_path} has no writable memory controller"
    with pytest.raises(OSError, match="memory limits unavailable"):
        limiter.limit("w", 1, 64 * MiB)
    nothing = detect_memory(tmp_path / "missing")
    assert nothing.version == "none"
    assert "no cgroup v1 memory hierarchy" in nothing.reason


def test_format_mib() -> None:
    assert format_mib(128 * MiB) == "128 MiB"
    assert format_mib(100_000_000) == "95.4 MiB"


REAL = detect_memory()


@pytest.mark.skipif(REAL.version == "none", reason=f"no writable memory cgroup: {REAL.reason}")
def test_a_process_over_its_limit_is_killed_and_counted() -> None:
    limiter = MemoryLimiter(REAL, parent=f"infless-test-{secrets.token_hex(3)}")
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.readline(); b = bytearray(256 << 20)"],
        stdin=subprocess.PIPE,
    )
    try:
        limit = limiter.limit("hog", child.pid, 48 * MiB)
        assert limiter.oom_kills(limit) == 0
        assert child.stdin is not None
        child.stdin.write(b"go\n")
        child.stdin.flush()
        assert child.wait(timeout=30) == -9
        assert limiter.oom_kills(limit) == 1
        limiter.release(limit)
        assert not limit.group.exists()
    finally:
        child.kill()
        child.wait()
        if child.stdin is not None:
            child.stdin.close()
        limiter.remove_parent()
    assert REAL.root is not None
    assert not (REAL.root / limiter.parent).exists()

"""Pids limits: where groups go (v1 under this process's own pids group), what is written,
and that a released group's strays are killed before it is removed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from infless.cluster.pids import PidsLayout, PidsLimiter, detect_pids


def _v1(root: Path) -> tuple[Path, Path]:
    own = root / "pids" / "sessions" / "s1"
    own.mkdir(parents=True)
    for directory in (root / "pids", own):  # cgroupfs: every group lists its tasks
        (directory / "cgroup.procs").write_text("")
    proc = root / "cgroup"
    proc.write_text("8:pids:/sessions/s1\n0::/\n")
    return own, proc


def test_v1_groups_nest_under_this_process_own_pids_group(tmp_path: Path) -> None:
    own, proc = _v1(tmp_path)
    assert detect_pids(tmp_path, proc) == PidsLayout("v1", own)


def test_no_hierarchy_says_why(tmp_path: Path) -> None:
    limiter = PidsLimiter(detect_pids(tmp_path, tmp_path / "cgroup"))
    assert limiter.unavailable is not None
    assert "no cgroup v1 pids hierarchy" in limiter.unavailable


def test_limit_writes_the_maximum_and_the_pid(tmp_path: Path) -> None:
    own, proc = _v1(tmp_path)
    limiter = PidsLimiter(detect_pids(tmp_path, proc), parent="infless")
    limit = limiter.limit("w-1", 42, 64)
    group = own / "infless" / "w-1"
    assert limit.group == group
    assert (group / "pids.max").read_text() == "64"
    assert (group / "cgroup.procs").read_text() == "42"
    assert limit.describe() == {"pidsMax": 64, "group": str(group)}


def test_kill_strays_kills_every_task_but_the_worker(tmp_path: Path) -> None:
    _, proc = _v1(tmp_path)
    limiter = PidsLimiter(detect_pids(tmp_path, proc))
    waiting = [sys.executable, "-c", "import sys; sys.stdin.read()"]
    worker, stray = (subprocess.Popen(waiting, stdin=subprocess.PIPE) for _ in range(2))
    try:
        limit = limiter.limit("w-2", worker.pid, 64)
        (limit.group / "cgroup.procs").write_text(f"{worker.pid}\n{stray.pid}\n")
        assert limiter.kill_strays(limit, keep=worker.pid) == 1
        assert stray.wait(timeout=10) == -9
        assert worker.poll() is None
    finally:
        for child in (worker, stray):
            child.kill()
            child.wait()
            assert child.stdin is not None
            child.stdin.close()

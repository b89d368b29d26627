"""Fault: a gateway died and left things behind in its state directory, or a second gateway
is pointed at a directory in use. The claim (`infless.statedir`) refuses the second
gateway with a message naming the holder; a new gateway kills the processes the dead one
recorded that still run, and only those (a pid reused by an unrelated process since is
left alone: its start time differs), and removes the dead one's private socket
directory."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from infless.errors import StateError
from infless.statedir import PRIVATE_DIR_PREFIX, claim_state_dir, run_records
from infless.workers.records import Orphan, start_ticks


@contextmanager
def _sleeper() -> Iterator[subprocess.Popen[bytes]]:
    with subprocess.Popen(["sleep", "60"]) as process:
        try:
            yield process
        finally:
            process.kill()


def test_a_second_gateway_on_a_state_directory_in_use_is_refused(tmp_path: Path) -> None:
    first = claim_state_dir(tmp_path)
    with pytest.raises(StateError) as refused:
        claim_state_dir(tmp_path)
    assert f"{tmp_path} is in use by another gateway (pid " in str(refused.value)
    assert "--state-dir" in str(refused.value)
    first.release()
    claim_state_dir(tmp_path).release()  # free again once the holder let go


def test_recorded_processes_still_running_are_killed_and_only_those(tmp_path: Path) -> None:
    records = run_records(tmp_path)
    with _sleeper() as orphan, _sleeper() as stranger, _sleeper() as gone:
        records.add(orphan.pid, "worker", "mnist-1")
        ticks = start_ticks(stranger.pid)
        assert ticks is not None
        # the recorded process died and an unrelated one got its pid: a different start
        (records.directory / str(stranger.pid)).write_text(f"{ticks - 1} worker mnist-2\n")
        records.add(gone.pid, "template", "template-x")
        gone.kill()
        gone.wait()

        claim = claim_state_dir(tmp_path)
        assert claim.orphans == [Orphan(orphan.pid, "worker", "mnist-1")]
        assert orphan.wait(timeout=10) == -9
        assert stranger.poll() is None, "a process the gateway never started is left alone"
        assert records.pids() == []
        claim.release()


def test_the_private_directory_of_a_dead_gateway_is_removed(tmp_path: Path) -> None:
    private = Path(tempfile.mkdtemp(prefix=PRIVATE_DIR_PREFIX))
    (private / "app.sock").touch()
    dies_holding_it = (
        "import sys; from pathlib import Path; from infless.statedir import claim_state_dir; "
        "claim_state_dir(Path(sys.argv[1])).note_private_dir(Path(sys.argv[2]))"
    )
    subprocess.run([sys.executable, "-c", dies_holding_it, tmp_path, private], check=True)
    claim = claim_state_dir(tmp_path)
    assert not private.exists()
    claim.release()

"""A worker's environment and secrets: the files exist in its own mount namespace only, 0400,
read-only; bad names and unprivileged callers are refused before anything is mounted."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from infless.workers.isolation import IsolationError, mount_secrets, probe_secrets

CHILD = """
import json, os, sys
from pathlib import Path
from infless.workers.isolation import mount_secrets
from infless.workers.runtime import enter_runtime
target = Path(sys.argv[1])
mount_secrets({"db-password": b"hunter2", "empty": b""}, target)
enter_runtime({"GREETING": "hi"}, None)
try:
    (target / "new").write_text("x")
    writable = True
except OSError:
    writable = False
report = {
    "files": sorted(os.listdir(target)),
    "value": (target / "db-password").read_text(),
    "mode": oct((target / "db-password").stat().st_mode & 0o7777),
    "writable": writable,
    "env": os.environ.get("GREETING"),
}
print(json.dumps(report), flush=True)
sys.stdin.readline()  # stay alive while the parent looks
"""


def test_secrets_exist_only_in_the_process_that_mounted_them(tmp_path: Path) -> None:
    reason = asyncio.run(probe_secrets())
    if reason is not None:
        pytest.skip(f"secrets cannot be mounted here: {reason}")
    target = tmp_path / "secrets"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(target)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdin is not None
    assert child.stdout is not None
    try:
        report = json.loads(child.stdout.readline())
        assert report == {
            "files": ["db-password", "empty"],
            "value": "hunter2",
            "mode": "0o400",
            "writable": False,
            "env": "hi",
        }
        assert target.is_dir()  # the mount point exists out here, empty
        assert list(target.iterdir()) == []
        assert "GREETING" not in os.environ
    finally:
        child.stdin.close()
        child.wait(timeout=10)
        child.stdout.close()
    assert child.returncode == 0


@pytest.mark.parametrize("name", ["", "a/b", "../etc", ".hidden"])
def test_bad_file_names_are_refused_before_anything_is_mounted(name: str, tmp_path: Path) -> None:
    with pytest.raises(IsolationError, match="not a valid secret file name"):
        mount_secrets({name: b"x"}, tmp_path / "secrets")
    assert not (tmp_path / "secrets").exists()


def test_an_unprivileged_worker_refuses_to_mount(tmp_path: Path) -> None:
    script = (
        "import os, sys\n"
        "from pathlib import Path\n"
        "from infless.workers.isolation import IsolationError, mount_secrets\n"
        "if os.geteuid() == 0: os.setuid(65534)\n"
        "try: mount_secrets({'s': b'x'}, Path(sys.argv[1]))\n"
        "except IsolationError as exc: print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "s")],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert done.stdout.startswith("secrets: mounting them needs root; this runs as uid ")


async def test_the_probe_answers_in_one_sentence_why_not() -> None:
    reason = await probe_secrets()
    assert reason is None or reason.startswith("secrets: ")
    if os.geteuid() != 0:
        assert reason is not None
        assert "needs root" in reason

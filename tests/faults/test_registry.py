"""Faults of the registry (`state/registry.sqlite`): locked by another process, and
corrupted with garbage bytes.

Locked (another process holds `BEGIN EXCLUSIVE`): invokes are answered as before; a deploy
or a scale gets a JSON 503 `registry_unavailable` naming the file, with Retry-After, and
changes nothing, neither in the registry nor in what runs; once the lock is gone the same
deploy succeeds and is recorded. Corrupted: the gateway refuses to start (exit 2) with a
message naming the file and the recovery, leaves the file as it is, and the documented
recovery (docs/operations.md: move it aside, put the backup in its place) brings back every
function the last clean stop knew."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.faults import MNIST, MNIST_BODY, own_store, registry_locked, registry_rows
from tests.support.gateway import GatewayProcess, start_gateway

DIGITS = {
    "service": "digits",
    "image": "mnist",
    "labels": {"com.infless.max.batch": "4"},
    "annotations": {"com.infless.latency_target": "1000ms"},
}


def _function_names(gateway: GatewayProcess) -> set[str]:
    return {f["name"] for f in gateway.json("GET", "/system/functions")}


def test_a_locked_registry_refuses_changes_and_keeps_serving(tmp_path: Path) -> None:
    with start_gateway(tmp_path, [{**MNIST, "instances": 1}], own_store(tmp_path)) as gateway:
        path = gateway.state_dir / "registry.sqlite"
        reference = gateway.request("POST", "/function/mnist", raw=MNIST_BODY)[2]
        with registry_locked(path):
            for _ in range(5):
                assert gateway.request("POST", "/function/mnist", raw=MNIST_BODY)[2] == reference
            status, headers, body = gateway.request("POST", "/system/functions", DIGITS)
            assert (status, headers.get("Retry-After")) == (503, "1")
            assert b'"code":"registry_unavailable"' in body
            assert str(path).encode() in body
            assert _function_names(gateway) == {"mnist"}
            status, _, body = gateway.request(
                "POST", "/system/scale-function/mnist", {"replicas": 2}
            )
            assert status == 503, body
            assert len(gateway.instances("mnist")) == 1, "nothing started for the refused scale"

        status, _, body = gateway.request("POST", "/system/functions", DIGITS)
        assert status == 202, body
        gateway.wait_ready("digits")
        rows = registry_rows(path)
        assert set(rows) == {"mnist", "digits"}
        assert rows["mnist"]["instances"] == 1


def test_a_corrupted_registry_stops_the_start_and_its_backup_restores_it(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    functions = [{**MNIST, "instances": 1}]
    with start_gateway(tmp_path, functions, own_store(tmp_path), state_dir=state) as gateway:
        status, _, body = gateway.request("POST", "/system/functions", DIGITS)
        assert status == 202, body
        config = gateway.config_path
    path = state / "registry.sqlite"
    with path.open("r+b") as file:  # the header and the first pages: garbage
        file.write(os.urandom(8192))
    damaged = path.read_bytes()

    refused = subprocess.run(
        [sys.executable, "-m", "infless.cli", "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        check=False,
    )
    assert refused.returncode == 2, refused.stderr
    message = refused.stderr.splitlines()[-1]
    assert message.startswith(f"infless: {path} is damaged")
    assert f"{path}.bak" in message
    assert "docs/operations.md" in message
    assert "Traceback" not in refused.stderr
    assert path.read_bytes() == damaged, "the damaged file is left as it was"

    aside = state / "damaged"  # the recovery of docs/operations.md
    aside.mkdir()
    for name in ("registry.sqlite", "registry.sqlite-wal", "registry.sqlite-shm"):
        if (state / name).exists():
            (state / name).rename(aside / name)
    shutil.copyfile(state / "registry.sqlite.bak", path)
    with start_gateway(tmp_path, functions, own_store(tmp_path), state_dir=state) as again:
        assert _function_names(again) == {"mnist", "digits"}
        again.wait_ready("digits")

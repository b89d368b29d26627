"""Fault: the state directory's disk is full (a small tmpfs as `state.dir`).

A gateway on a new, full state directory cannot create its registry: it says so and exits
2. On a state directory that has its registry, a full disk does not stop it: it starts and
serves; a deploy that cannot be recorded gets a JSON 507 `state_disk_full` naming the
directory, and nothing is deployed; once there is room, the same deploy is recorded."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.faults import MNIST, MNIST_BODY, fill, own_store, registry_rows, small_tmpfs
from tests.support.gateway import render_config, start_gateway

# a deployment the registry cannot hold in the pages it already has
BIG = {
    "service": "digits",
    "image": "mnist",
    "annotations": {"com.infless.latency_target": "1000ms", "note": "x" * 65536},
}

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")


def _filled(state: Path) -> None:
    fill(state)
    assert os.statvfs(state).f_bavail == 0


def _emptied(state: Path) -> None:
    for filler in state.glob("filler*"):
        filler.unlink()


def test_a_full_state_disk_refuses_what_it_cannot_record(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "state", 2 * 1024 * 1024) as state:
        _filled(state)
        config = tmp_path / "fresh.toml"
        config.write_text(render_config({"state": {"dir": str(state)}}, []))
        refused = subprocess.run(
            [sys.executable, "-m", "infless.cli", "serve", "--config", str(config), "--port", "0"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert refused.returncode == 2, refused.stderr
        assert "disk is full" in refused.stderr.splitlines()[-1]
        assert "Traceback" not in refused.stderr

        _emptied(state)
        functions = [{**MNIST, "instances": 1}]
        with start_gateway(tmp_path, functions, own_store(tmp_path), state_dir=state) as gateway:
            reference = gateway.request("POST", "/function/mnist", raw=MNIST_BODY)[2]
            _filled(state)
            status, _, body = gateway.request("POST", "/system/functions", BIG)
            assert status == 507, body
            assert b'"code":"state_disk_full"' in body
            assert str(state).encode() in body
            assert {f["name"] for f in gateway.json("GET", "/system/functions")} == {"mnist"}
            assert gateway.request("POST", "/function/mnist", raw=MNIST_BODY)[2] == reference

            _emptied(state)
            status, _, body = gateway.request("POST", "/system/functions", BIG)
            assert status == 202, body
            gateway.wait_ready("digits")
            assert set(registry_rows(state / "registry.sqlite")) == {"mnist", "digits"}

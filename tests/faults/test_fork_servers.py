"""Faults of the processes workers are forked from: the zygote SIGKILLed (the workers it
forked keep serving; the next start that needs it starts a new one), and a model's template
SIGKILLed while a fork request waits on it (the instance is forked from the zygote
instead, and the next one gets a new template)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import psutil

from tests.support.faults import MNIST, MNIST_BODY, Load, own_store, running, slow_package
from tests.support.gateway import GatewayProcess, start_gateway


def _zygote_pids(gateway: GatewayProcess) -> set[int]:
    """The gateway's own children: only the zygote (workers are the zygote's)."""
    return {child.pid for child in psutil.Process(gateway.pid).children()}


def test_killing_the_zygote_leaves_workers_serving_and_starts_recover(tmp_path: Path) -> None:
    with start_gateway(tmp_path, [{**MNIST, "instances": 2}], own_store(tmp_path)) as gateway:
        reference = gateway.request("POST", "/function/mnist", raw=MNIST_BODY)[2]
        workers = gateway.worker_pids()
        (zygote,) = _zygote_pids(gateway)
        with Load(gateway.url, "/function/mnist", lambda _: MNIST_BODY) as load:
            load.wait_answered(10)
            os.kill(zygote, signal.SIGKILL)
            load.wait_answered(load.answered() + 40)
            replies = load.stop()
        assert {(r.status, r.body) for r in replies} == {(200, reference)}
        assert gateway.worker_pids() == workers, "no worker died with the zygote"
        assert all(running(pid) for pid in workers)

        # a model with no template yet must be forked from the zygote: a new one starts
        package = slow_package(tmp_path / "slow")
        deployment = {"service": "slow", "image": str(package)}
        status, _, body = gateway.request("POST", "/system/functions", deployment)
        assert status == 202, body
        (slow,) = gateway.wait_ready("slow")
        (new_zygote,) = _zygote_pids(gateway)
        assert new_zygote != zygote
        assert gateway.request("POST", "/function/slow", {"inputs": [0, 7]})[2] == (
            b'{"outputs":[0.0,7.0]}'
        )
        assert slow["pid"] in {c.pid for c in psutil.Process(new_zygote).children()}
    # orphans of the dead zygote, not the gateway's descendants: stopped all the same
    deadline = time.monotonic() + 10
    while any(running(pid) for pid in workers):
        assert time.monotonic() < deadline, "a worker of the killed zygote outlived the gateway"
        time.sleep(0.05)


def test_a_template_killed_mid_fork_falls_back_to_the_zygote(tmp_path: Path) -> None:
    with start_gateway(tmp_path, [{**MNIST, "instances": 2}], own_store(tmp_path)) as gateway:
        reference = gateway.request("POST", "/function/mnist", raw=MNIST_BODY)[2]
        (template,) = _wait_templates(gateway)
        before = gateway.worker_pids()
        os.kill(template["pid"], signal.SIGSTOP)  # the fork request will wait on it
        status, _, _ = gateway.request("POST", "/system/scale-function/mnist", {"replicas": 3})
        assert status == 202
        _wait_starting(gateway, "mnist")
        time.sleep(0.3)  # the start publishes, then sends its fork request to the template
        os.kill(template["pid"], signal.SIGKILL)
        ready = gateway.wait_ready("mnist", 3)
        assert not running(template["pid"])
        (new,) = [i for i in ready if i["pid"] not in before]
        assert new["template"] is None, "forked from the zygote, not from a template"
        for _ in range(6):  # the new instance among them: every answer is right
            assert gateway.request("POST", "/function/mnist", raw=MNIST_BODY)[2] == reference
        assert len({i["pid"] for i in ready}) == 3

        # the next instance starts a new template beside it
        status, _, _ = gateway.request("POST", "/system/scale-function/mnist", {"replicas": 4})
        assert status == 202
        gateway.wait_ready("mnist", 4)
        (replacement,) = _wait_templates(gateway)
        assert replacement["pid"] != template["pid"]


def _wait_templates(gateway: GatewayProcess) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        templates: list[dict[str, Any]] = gateway.json("GET", "/system/templates")
        if templates and all(t["alive"] for t in templates):
            return templates
        time.sleep(0.05)
    raise AssertionError("no template started")


def _wait_starting(gateway: GatewayProcess, function: str) -> None:
    deadline = time.monotonic() + 30
    while not any(i["state"] == "starting" for i in gateway.instances(function)):
        assert time.monotonic() < deadline, "no instance started"
        time.sleep(0.01)

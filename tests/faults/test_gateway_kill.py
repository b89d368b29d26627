"""Fault: the gateway SIGKILLed under load, one of its workers stuck (stopped) so that it
cannot notice, and a publication cut short in the store. A gateway started again on the
same state directory has its registry back (a function deployed and scaled over the API,
not in the config), kills what the dead one left running (found by its PID records, never
by name), removes the stale store file, and serves every function with exactly the
instances it should have; no request got a wrong answer or an error other than a refused
connection while no gateway ran."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import psutil

from tests.support.faults import MNIST, MNIST_BODY, Load, own_store, running
from tests.support.gateway import GatewayProcess, start_gateway

STALE_TEMP = ".tmp-" + "ab" * 20 + "-4242-4242"  # a publication its writer never finished
CONNECTION_ERRORS = {
    "ConnectionRefusedError",
    "ConnectionResetError",
    "ConnectionAbortedError",
    "BrokenPipeError",
    "RemoteDisconnected",
}


def _deploy_over_api(gateway: GatewayProcess) -> None:
    deployment = {
        "service": "digits",
        "image": "mnist",
        "labels": {"com.infless.max.batch": "4"},
        "annotations": {"com.infless.latency_target": "1000ms"},
    }
    status, _, body = gateway.request("POST", "/system/functions", deployment)
    assert status == 202, body
    gateway.wait_ready("digits")
    status, _, body = gateway.request("POST", "/system/scale-function/digits", {"replicas": 2})
    assert status == 202, body
    gateway.wait_ready("digits", 2)


def _processes_of(gateway: GatewayProcess) -> set[int]:
    return {child.pid for child in psutil.Process(gateway.pid).children(recursive=True)}


def test_a_killed_gateway_is_cleaned_up_after_and_restarts_whole(tmp_path: Path) -> None:
    state, sections = tmp_path / "state", own_store(tmp_path, keepalive_s=600.0)
    functions = [{**MNIST, "instances": 1}]
    with start_gateway(tmp_path, functions, sections, state_dir=state) as first:
        _deploy_over_api(first)
        reference = first.request("POST", "/function/mnist", raw=MNIST_BODY)[2]
        left_behind = _processes_of(first) | {
            t["pid"] for t in first.json("GET", "/system/templates")
        }
        stuck = first.instances("digits")[0]["pid"]
        tenant_dir = tmp_path / "store" / "default"
        (tenant_dir / STALE_TEMP).write_bytes(b"half a tensor")
        with Load(first.url, "/function/mnist", lambda _: MNIST_BODY) as load:
            load.wait_answered(20)
            os.kill(stuck, signal.SIGSTOP)  # it will not see its socket close
            first.process.kill()
            first.process.wait()
            assert running(stuck)

            with start_gateway(tmp_path, functions, sections, state_dir=state) as second:
                load.url = second.url  # the clients follow the gateway to its new port
                assert not [pid for pid in left_behind if running(pid)], (
                    "everything the killed gateway started is gone, the stuck worker included"
                )
                assert {f["name"] for f in second.json("GET", "/system/functions")} == {
                    "mnist",
                    "digits",
                }
                second.wait_ready("digits", 2)
                ready = [i for i in second.instances() if i["state"] == "ready"]
                assert sorted(i["function"] for i in ready) == ["digits", "digits", "mnist"]
                assert not (tenant_dir / STALE_TEMP).exists()
                before_restart = load.answered()
                load.wait_answered(before_restart + 20)
                replies = load.stop()

    answered = [r for r in replies if not r.error]
    assert answered, "the load was answered"
    assert {(r.status, r.body) for r in answered} == {(200, reference)}
    # while no gateway ran: refused, reset, or cut mid-request (a body being sent when the
    # gateway died is a broken pipe) — never an answer that was wrong or an error over HTTP
    refused = {r.error.partition(":")[0] for r in replies if r.error}
    assert refused <= CONNECTION_ERRORS, refused

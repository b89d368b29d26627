"""Faults under load, measured: the long versions of `tests/faults/`, each against a
baseline in the same run.

One function, `mnist` (SLO 1 s, two instances), is driven closed-loop by `--clients`
threads, one request per fresh connection, for `--seconds` around each fault. An answer
counts as lost unless it is 200 with the reference output, or the refusal the fault
documents (docs/operations.md).

- `zygote`: the zygote SIGKILLed under load: lost answers; then the time to ready of one
  more instance with the zygote gone (a new one starts first) against the same start with
  the zygote alive (templates off, so every start forks from the zygote).
- `kill`: one worker stopped (SIGSTOP: it cannot see its gateway die), the gateway
  SIGKILLed under load and started again on the same state directory, the clients
  following it: the downtime (last answer before the kill to the first after), restart to
  ready against the first, cold start of the same run, processes of the killed gateway
  still running after the restart (the stopped worker included), instances after against
  wanted, HTTP errors (connections refused while no gateway ran are counted apart).
- `sigterm`: SIGTERM under load: answers after the signal (200: accepted before it; 503
  `draining`: after), anything else, the exit code, and the drain time against the drain
  of an idle gateway.
- `truncate`: every store file of the model truncated under load: 200s, 503
  `worker_unavailable`s, anything else, and the time until every instance is ready again,
  against a worker SIGKILLed under the same load (the pool's usual replacement).
- `connections`: p50/p99 latency with nothing else, with `--idle` idle connections open
  (`gateway.max_connections` = 2,000: the oldest are closed), with `--slow` slow-loris
  clients (`gateway.read_timeout_s` = 2 s: they get 408 and reconnect); the gateway's open
  descriptors.

Prints a table per fault and ends with one JSON line holding every figure.

    .venv/bin/python -m bench.faults [--faults zygote,kill,sigterm,truncate,connections]
        [--seconds 10] [--clients 4] [--idle 10000] [--slow 200]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil

from bench.fault_clients import (
    Load,
    Reply,
    SlowLoris,
    idle_connections,
    latency_ms,
    post,
    ready_instances,
    wait_ready_s,
)
from bench.harness import Gateway, build_models, gateway

BODY = json.dumps({"inputs": [[[0.5] * 28] * 28]}).encode()
PATH = "/function/mnist"
FUNCTIONS = """
[[functions]]
name = "mnist"
image = "mnist"
slo_ms = 1000
max_batch = 4
instances = 2
"""
FAULTS = ("zygote", "kill", "sigterm", "truncate", "connections")


@contextmanager
def _gateway(
    workdir: Path, store: Path, workers: str = "", gateway_toml: str = ""
) -> Iterator[Gateway]:
    """A gateway serving `mnist` (two instances) with its store at `store`."""
    settings = (
        f'[store]\nroot = "{store}"\n[scaling]\npolicy = "none"\n'
        f"[batching]\nwarmup_rounds = 1\n[workers]\n{workers}\n"
    )
    with gateway(workdir, FUNCTIONS, settings, gateway_toml=gateway_toml) as gw:
        gw.wait_ready("mnist", 2)
        yield gw


def _outcomes(replies: list[Reply], reference: bytes, allowed: set[str]) -> dict[str, int]:
    """200s with the reference; refusals whose code is `allowed`; refused connections;
    anything else (lost)."""
    ok = sum(1 for r in replies if r.status == 200 and r.body == reference)
    refused = sum(1 for r in replies if r.status and r.code in allowed)
    no_connection = sum(1 for r in replies if not r.status)
    return {
        "answered": ok,
        "refused": refused,
        "no_connection": no_connection,
        "lost": len(replies) - ok - refused - no_connection,
    }


def _under_load(
    gw: Gateway, clients: int, seconds: float, fault: Callable[[], None]
) -> list[Reply]:
    with Load(gw.url, PATH, BODY, clients) as load:
        time.sleep(seconds / 2)
        fault()
        time.sleep(seconds / 2)
        return load.stop()


def bench_zygote(workdir: Path, store: Path, args: argparse.Namespace) -> dict[str, Any]:
    with _gateway(workdir, store, workers="templates = false") as gw:
        reference = post(gw.url, PATH, BODY).body
        alive_s = _scale(gw, 3)
        (zygote,) = psutil.Process(gw.process.pid).children()
        replies = _under_load(gw, args.clients, args.seconds, zygote.kill)
        after_s = _scale(gw, 4)
    return {
        **_outcomes(replies, reference, set()),
        "start_s_zygote_alive": round(alive_s, 3),
        "start_s_zygote_killed": round(after_s, 3),
    }


def _scale(gw: Gateway, replicas: int) -> float:
    """Seconds from asking for `replicas` instances to having them ready."""
    started = time.monotonic()
    body = json.dumps({"replicas": replicas}).encode()
    reply = post(gw.url, "/system/scale-function/mnist", body)
    if reply.status != 202:
        raise RuntimeError(f"scale to {replicas}: {reply}")
    wait_ready_s(gw.url, "mnist", replicas)
    return time.monotonic() - started


def bench_kill(workdir: Path, store: Path, args: argparse.Namespace) -> dict[str, Any]:
    started = time.monotonic()
    with _gateway(workdir, store) as first:
        cold_s = time.monotonic() - started
        reference = post(first.url, PATH, BODY).body
        before = {p.pid for p in psutil.Process(first.process.pid).children(recursive=True)}
        stuck = ready_instances(first.url, "mnist")[0]["pid"]
        with Load(first.url, PATH, BODY, args.clients) as load:
            time.sleep(args.seconds / 2)
            os.kill(stuck, signal.SIGSTOP)
            killed_s = time.monotonic()
            first.process.kill()
            first.process.wait()
            with _gateway(workdir, store) as second:
                restart_s = time.monotonic() - killed_s
                load.url = second.url
                left = [pid for pid in before if psutil.pid_exists(pid) and _alive(pid)]
                ready = len(ready_instances(second.url, "mnist"))
                time.sleep(args.seconds / 2)
                replies = load.stop()
    after = [r for r in replies if r.status and r.sent_s > killed_s]
    last_before = max(r.done_s for r in replies if r.status and r.done_s < killed_s)
    return {
        **_outcomes(replies, reference, set()),
        "downtime_s": round(min(r.done_s for r in after) - last_before, 3),
        "restart_to_ready_s": round(restart_s, 3),
        "cold_start_to_ready_s": round(cold_s, 3),
        "left_running": len(left),
        "instances_after": ready,
        "instances_wanted": 2,
    }


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def bench_sigterm(workdir: Path, store: Path, args: argparse.Namespace) -> dict[str, Any]:
    with _gateway(workdir / "idle", store) as idle:
        started = time.monotonic()
        idle.process.send_signal(signal.SIGTERM)
        idle.process.wait(120)
        idle_drain_s = time.monotonic() - started
    with _gateway(workdir / "loaded", store) as gw, Load(gw.url, PATH, BODY, args.clients) as load:
        reference = post(gw.url, PATH, BODY).body
        time.sleep(args.seconds / 2)
        signalled = time.monotonic()
        gw.process.send_signal(signal.SIGTERM)
        code = gw.process.wait(120)
        drain_s = time.monotonic() - signalled
        replies = [r for r in load.stop() if r.done_s >= signalled]
    outcomes = _outcomes([r for r in replies if r.status], reference, {"draining"})
    return {
        "answered_after_sigterm": outcomes["answered"],
        "refused_draining": outcomes["refused"],
        "lost": outcomes["lost"],
        "exit_code": code,
        "drain_s": round(drain_s, 3),
        "idle_drain_s": round(idle_drain_s, 3),
    }


def bench_truncate(workdir: Path, store: Path, args: argparse.Namespace) -> dict[str, Any]:
    with _gateway(workdir, store) as gw:
        reference = post(gw.url, PATH, BODY).body
        worker = ready_instances(gw.url, "mnist")[0]["pid"]
        kill_replies, kill_s = _recovery(gw, args, lambda: os.kill(worker, signal.SIGKILL))
        tenant = store / "default"

        def truncate() -> None:
            for path in tenant.iterdir():
                if not path.name.startswith("."):
                    os.truncate(path, path.stat().st_size // 2)

        replies, recovery_s = _recovery(gw, args, truncate)
    outcomes = _outcomes(replies, reference, {"worker_unavailable"})
    return {
        **outcomes,
        "recovery_s": round(recovery_s, 3),
        "worker_kill_lost": _outcomes(kill_replies, reference, {"worker_unavailable"})["lost"],
        "worker_kill_refused": _outcomes(kill_replies, reference, {"worker_unavailable"})[
            "refused"
        ],
        "worker_kill_recovery_s": round(kill_s, 3),
    }


def _recovery(
    gw: Gateway, args: argparse.Namespace, fault: Callable[[], None]
) -> tuple[list[Reply], float]:
    """Replies around `fault`, and the seconds until both instances are ready again with
    pids other than those the fault hit."""
    before = {i["pid"] for i in ready_instances(gw.url, "mnist")}
    recovered_s = [0.0]

    def fault_then_wait() -> None:
        started = time.monotonic()
        fault()
        while True:
            ready = {i["pid"] for i in ready_instances(gw.url, "mnist")}
            if len(ready) == 2 and ready != before:
                break
            time.sleep(0.02)
        recovered_s[0] = time.monotonic() - started

    return _under_load(gw, args.clients, args.seconds, fault_then_wait), recovered_s[0]


def bench_connections(workdir: Path, store: Path, args: argparse.Namespace) -> dict[str, Any]:
    limits = "max_connections = 2000\nread_timeout_s = 2.0"
    with _gateway(workdir, store, gateway_toml=limits) as gw:
        fds = Path(f"/proc/{gw.process.pid}/fd")
        figures: dict[str, Any] = {}
        with Load(gw.url, PATH, BODY, args.clients) as load:
            time.sleep(args.seconds)
            figures["alone"] = _latency(load.stop())
        with idle_connections(gw.url, args.idle), Load(gw.url, PATH, BODY, args.clients) as load:
            time.sleep(args.seconds)
            figures["idle"] = _latency(load.stop())
            figures["idle"]["gateway_fds"] = sum(1 for _ in fds.iterdir())
        with SlowLoris(gw.url, args.slow) as slow, Load(gw.url, PATH, BODY, args.clients) as load:
            time.sleep(args.seconds)
            figures["slow"] = _latency(load.stop()) | {"cut_408": slow.cut_408}
    return figures


def _latency(replies: list[Reply]) -> dict[str, Any]:
    return {
        "requests": len(replies),
        "non_200": sum(1 for r in replies if r.status != 200),
        "p50_ms": latency_ms(replies, 50),
        "p99_ms": latency_ms(replies, 99),
    }


BENCHES = {
    "zygote": bench_zygote,
    "kill": bench_kill,
    "sigterm": bench_sigterm,
    "truncate": bench_truncate,
    "connections": bench_connections,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--faults", default=",".join(FAULTS), help="comma-separated")
    parser.add_argument("--seconds", type=float, default=10.0, help="load around each fault")
    parser.add_argument("--clients", type=int, default=4, help="closed-loop client threads")
    parser.add_argument("--idle", type=int, default=10_000, help="idle connections opened")
    parser.add_argument("--slow", type=int, default=200, help="slow-loris clients")
    args = parser.parse_args()
    unknown = sorted(set(args.faults.split(",")) - set(FAULTS))
    if unknown:
        parser.error(f"--faults {args.faults!r}: no fault named {unknown}; use {','.join(FAULTS)}")
    build_models("mnist")
    results: dict[str, Any] = {}
    scratch = Path(tempfile.mkdtemp(prefix="infless-bench-faults-"))
    shm = Path(tempfile.mkdtemp(prefix="infless-bench-faults-", dir="/dev/shm"))
    try:
        for name in args.faults.split(","):
            results[name] = BENCHES[name](scratch / name, shm / name / "store", args)
            print(f"== {name}")
            for key, value in results[name].items():
                print(f"  {key:28} {value}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(shm, ignore_errors=True)
    print(
        json.dumps({"bench": "faults", "seconds": args.seconds, "clients": args.clients, **results})
    )


if __name__ == "__main__":
    main()

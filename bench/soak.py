"""Soak: does infless run for a long time without leaking, under load and disruption?

A fresh gateway with the shipped `config.toml` settings (the autoscaler on) serves two
loaded functions — `mnist` (SLO 200 ms) and `text` (`textcnn-69`, SLO 50 ms) — for
`--minutes` (default 20), while:

- **trace-replayed load**: the load generator (`loadgen replay`, a separate process)
  replays bursty rows of the Azure Functions sample (`examples/traces/1000_inv.csv.gz`),
  one trace minute every `--minute-s` seconds, each function's busiest window scaled to
  `--peak-rps`;
- **worker kills**: every `--kill-every-s`, one worker of a loaded function (in turn) is
  SIGKILLed; its replacement (same instance id, new pid, ready) is timed;
- **churn**: a third function (`churn`, `resnet-20-cifar`) is deployed, scaled to two
  instances, back to one, and removed, one step every `--churn-step-s`, again and again;
  a few requests go to it after each step (`bench.soak_schedule`).

Every `--sample-s`: each process of the gateway's tree (gateway, workers, templates,
zygote and helpers) with its RSS and open file descriptors, and the tensor store's files
and bytes (`bench.soak_measure`), and once more at the same point of every churn cycle
(just before it deploys again: a quiet sample; not before its first deploy, since the
store keeps a removed function's tensors for `store.keepalive_s`, so the baseline is a
state the churn function has been through once). At the end: growth of each series, read on
the quiet samples — late third against early third after a warm-up share, and the slope
per hour: the baseline is the run's own start — with its peak over all samples; requests by
outcome (200, 429, anything else is an error: nothing accepted may be lost), kills and how
long their replacements took, a plot (`soak.png`, `bench.soak_plot`), every sample
(`samples.json`) and one JSON line last.

    .venv/bin/python -m bench.soak [--minutes 20] [--out DIR] [--kill-every-s 60]
        [--churn-step-s 30] [--sample-s 5] [--peak-rps 8] [--minute-s 10]

Bounded in time (`--minutes`, plus start and drain) and requests (`--max-requests`);
targets 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.harness import REPO_ROOT, Gateway, build_models, gateway
from bench.soak_measure import Sample, growth, sample_tree, window_counts
from bench.soak_plot import plot_soak
from bench.soak_schedule import Event, schedule
from bench.steps import config_sections

LOADED = {"mnist": ("mnist", 200), "text": ("textcnn-69", 50)}
CHURN = "churn"
CHURN_IMAGE = "resnet-20-cifar"
CHURN_CALLS = 5  # requests to the churn function after each of its steps
TRACE = REPO_ROOT / "examples" / "traces" / "1000_inv.csv.gz"
MNIST_BODY = json.dumps({"inputs": [[[0.5] * 28] * 28]}).encode()
CIFAR_BODY = json.dumps({"inputs": [[[0.5] * 32] * 32] * 3}).encode()


def functions_toml() -> str:
    return "".join(
        f'[[functions]]\nname = "{name}"\nimage = "{image}"\nslo_ms = {slo_ms}\n'
        "max_batch = 8\ninstances = 1\n"
        for name, (image, slo_ms) in LOADED.items()
    )


def _call(gw: Gateway, method: str, path: str, body: bytes | None = None) -> int:
    """One request to the gateway; its status (0: no answer)."""
    request = urllib.request.Request(gw.url + path, data=body, method=method)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            response.read()
            return int(response.status)
    except urllib.error.HTTPError as error:
        error.read()
        return int(error.code)
    except OSError:
        return 0


@dataclass
class Kill:
    at_s: float
    function: str
    instance: str
    pid: int
    replaced_after_s: float | None = None


@dataclass
class Driver:
    """Fires the schedule's events at the gateway and keeps what they did."""

    gw: Gateway
    started: float
    store: Path
    samples: list[Sample] = field(default_factory=list)
    kills: list[Kill] = field(default_factory=list)
    churn_statuses: list[tuple[float, int]] = field(default_factory=list)
    failed_events: list[str] = field(default_factory=list)
    cycles_done: int = 0  # churn cycles ended by a removal

    def now_s(self) -> float:
        return time.monotonic() - self.started

    def fire(self, event: Event) -> None:
        if event.kind == "kill":
            self._kill(event)
            return
        if event.kind == "deploy":  # the same point of every churn cycle after the first
            self.sample(quiet=self.cycles_done > 0)
        deployment = {
            "service": CHURN,
            "image": CHURN_IMAGE,
            "annotations": {"com.infless.latency_target": "200ms"},
            "labels": {"com.infless.max.batch": "4"},
        }
        if event.kind == "deploy":
            status = _call(self.gw, "POST", "/system/functions", json.dumps(deployment).encode())
        elif event.kind == "remove":
            body = json.dumps({"functionName": CHURN}).encode()
            status = _call(self.gw, "DELETE", "/system/functions", body)
        else:
            replicas = 2 if event.kind == "scale-up" else 1
            body = json.dumps({"replicas": replicas}).encode()
            status = _call(self.gw, "POST", f"/system/scale-function/{CHURN}", body)
        if status != 202:
            self.failed_events.append(f"{event.kind} at {event.at_s:.0f} s: {status}")
        if event.kind == "remove":
            self.cycles_done += 1
        if event.kind != "remove":
            for _ in range(CHURN_CALLS):
                answer = _call(self.gw, "POST", f"/function/{CHURN}", CIFAR_BODY)
                self.churn_statuses.append((self.now_s(), answer))

    def _kill(self, event: Event) -> None:
        ready = [
            i
            for i in self.gw.get("/system/instances")
            if i["function"] == event.function and i["state"] == "ready" and i["pid"]
        ]
        if not ready:
            self.failed_events.append(f"kill at {event.at_s:.0f} s: no ready {event.function}")
            return
        victim = ready[0]
        os.kill(victim["pid"], signal.SIGKILL)
        self.kills.append(Kill(self.now_s(), event.function, victim["id"], victim["pid"]))

    def check_replacements(self, instances: list[dict[str, Any]]) -> None:
        for kill in self.kills:
            if kill.replaced_after_s is not None:
                continue
            for i in instances:
                if i["id"] == kill.instance and i["pid"] != kill.pid and i["state"] == "ready":
                    kill.replaced_after_s = self.now_s() - kill.at_s

    def sample(self, quiet: bool = False) -> None:
        instances = self.gw.get("/system/instances")
        self.check_replacements(instances)
        workers = {i["pid"] for i in instances if i["pid"] and i["state"] == "ready"}
        templates = {t["pid"] for t in self.gw.get("/system/templates") if t.get("pid")}
        pid = self.gw.process.pid
        self.samples.append(sample_tree(self.now_s(), pid, workers, templates, self.store, quiet))


def start_load(gw: Gateway, args: argparse.Namespace, out: Path) -> subprocess.Popen[bytes]:
    minutes = math.ceil(args.minutes * 60.0 / args.minute_s)
    command = [
        sys.executable,
        "-m",
        "loadgen",
        "replay",
        "--gateway",
        gw.url,
        "--trace",
        str(TRACE),
        "--pattern",
        "bursty",
        "--rows",
        "2",
        "--functions",
        ",".join(LOADED),
        "--minutes",
        str(minutes),
        "--minute-seconds",
        str(args.minute_s),
        "--peak-rps",
        str(args.peak_rps),
        "--max-duration-s",
        str(args.minutes * 60.0 + 60.0),
        "--max-requests",
        str(args.max_requests),
        "--poll-interval-s",
        "5",
        "--seed",
        str(args.seed),
        "--no-progress",
        "--out",
        str(out),
    ]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def load_outcomes(out: Path) -> list[tuple[float, int]]:
    """(send time s, status) of every request the load generator sent."""
    with (out / "records.csv").open(newline="", encoding="utf-8") as handle:
        return [(float(r["sent_s"]), int(r["status"])) for r in csv.DictReader(handle)]


def run(args: argparse.Namespace) -> dict[str, Any]:
    build_models(*(image for image, _ in LOADED.values()), CHURN_IMAGE)
    work = Path(args.out or tempfile.mkdtemp(prefix="infless-soak-"))
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else work  # the store on tmpfs
    store = base / f"infless-soak-store-{os.getpid()}"
    extra = config_sections() + f'\n[store]\nroot = "{store}"\n'
    duration_s = args.minutes * 60.0
    events = schedule(duration_s, args.kill_every_s, args.churn_step_s, list(LOADED), CHURN)
    with gateway(work / "gateway", functions_toml(), extra) as gw:
        for name in LOADED:
            gw.wait_ready(name)
        load = start_load(gw, args, work / "load")
        driver = Driver(gw, time.monotonic(), store)
        pending = list(events)
        next_sample_s = 0.0
        while load.poll() is None and driver.now_s() < duration_s + 120.0:
            now_s = driver.now_s()
            while pending and pending[0].at_s <= now_s:
                driver.fire(pending.pop(0))
            if now_s >= next_sample_s:
                driver.sample()
                next_sample_s = now_s + args.sample_s
            time.sleep(0.2)
        if load.poll() is None:
            load.kill()
        _, stderr = load.communicate()
        driver.sample()  # the last: not at the same point of a churn cycle (it may be draining)
        if load.returncode != 0:
            raise RuntimeError(f"loadgen failed: {stderr.decode(errors='replace')[-2000:]}")
    outcomes = load_outcomes(work / "load") + driver.churn_statuses
    windows = window_counts(outcomes, args.window_s)
    plot = plot_soak(work / "soak.png", driver.samples, windows, events)
    samples_json = json.dumps([asdict(s) for s in driver.samples], indent=1)
    (work / "samples.json").write_text(samples_json, encoding="utf-8")
    return summarize(args, driver.samples, outcomes, driver, plot)


SERIES: dict[str, Callable[[Sample], float]] = {
    "gateway_rss_mib": lambda s: s.rss_mib["gateway"],
    "worker_rss_mib_per_instance": lambda s: (
        sum(s.workers_rss_mib) / max(1, len(s.workers_rss_mib))
    ),
    "templates_rss_mib": lambda s: s.rss_mib["template"],
    "helpers_rss_mib": lambda s: s.rss_mib["helper"],
    "gateway_fds": lambda s: s.fds["gateway"],
    "all_fds": lambda s: sum(s.fds.values()),
    "processes": lambda s: sum(s.processes.values()),
    "store_mib": lambda s: s.store_mib,
    "store_files": lambda s: s.store_files,
}


def summarize(
    args: argparse.Namespace,
    samples: list[Sample],
    outcomes: list[tuple[float, int]],
    driver: Driver,
    plot: Path,
) -> dict[str, Any]:
    statuses = Counter(status for _, status in outcomes)
    replaced = [k.replaced_after_s for k in driver.kills if k.replaced_after_s is not None]
    quiet = [s for s in samples if s.quiet]
    read = quiet if len(quiet) >= 3 else samples  # growth at the same point of every cycle
    grew = {}
    for name, value in SERIES.items():
        described = growth([(s.at_s, float(value(s))) for s in read]).describe()
        grew[name] = described | {"peak": round(max(float(value(s)) for s in samples), 2)}
    return {
        "bench": "soak",
        "minutes": args.minutes,
        "samples": len(samples),
        "requests": sum(statuses.values()),
        "ok": statuses.get(200, 0),
        "rejected_429": statuses.get(429, 0),
        "errors": sum(n for status, n in statuses.items() if status not in (200, 429)),
        "error_statuses": {str(k): n for k, n in statuses.items() if k not in (200, 429)},
        "kills": len(driver.kills),
        "replaced": len(replaced),
        "replacement_s_max": round(max(replaced), 2) if replaced else None,
        "failed_events": driver.failed_events,
        "growth_read_on": f"{len(read)} {'quiet' if read is quiet else 'all'} samples",
        "growth": grew,
        "plot": str(plot),
    }


def print_table(summary: dict[str, Any]) -> None:
    print(f"soak: {summary['minutes']} min, {summary['samples']} samples")
    print(
        f"requests {summary['requests']}: ok {summary['ok']}, 429 {summary['rejected_429']}, "
        f"errors {summary['errors']} {summary['error_statuses']}"
    )
    print(
        f"kills {summary['kills']}, replaced {summary['replaced']} "
        f"(longest {summary['replacement_s_max']} s); failed events {summary['failed_events']}"
    )
    print(f"growth read on {summary['growth_read_on']}")
    print(f"{'series':<30} {'early':>10} {'late':>10} {'change %':>9} {'slope/h':>10} {'peak':>10}")
    for name, g in summary["growth"].items():
        print(
            f"{name:<30} {g['early']:>10.2f} {g['late']:>10.2f} {g['change_pct']:>9.1f} "
            f"{g['slope_per_h']:>10.2f} {g['peak']:>10.2f}"
        )
    print(f"plot: {summary['plot']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.soak", description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=20.0)
    parser.add_argument("--out", default="", help="working directory (default: a temp dir)")
    parser.add_argument("--kill-every-s", type=float, default=60.0)
    parser.add_argument("--churn-step-s", type=float, default=30.0)
    parser.add_argument("--sample-s", type=float, default=5.0)
    parser.add_argument("--window-s", type=float, default=10.0, help="outcome counting window")
    parser.add_argument("--peak-rps", type=float, default=8.0, help="per function")
    parser.add_argument("--minute-s", type=float, default=10.0, help="seconds per trace minute")
    parser.add_argument("--max-requests", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    summary = run(args)
    print_table(summary)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())

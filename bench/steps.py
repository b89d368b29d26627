"""One load step against a running gateway, as the SLO benches measure it: the load generator
(`loadgen synthetic`, a separate process on the same cores) sends an open-loop schedule
(Poisson at a rate, a ramp, ...) of one sample per request; the step reports what the client
saw (offered and achieved rate, p50/p99 of the 200s, answers later than the SLO, 429s — each
must carry Retry-After — and every other error), the CPU per request of the gateway's process
tree and of the client, the batch sizes the answers came in, and the instances at its end.
A step **passes** when it kept up (achieved ≥ 97 % of offered), its p99 is within the SLO
and nothing failed: a 429 is a failure too.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import time
import tomllib
import zlib
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

from bench.harness import REPO_ROOT, Gateway

KEEP_UP = 0.97


@dataclass
class Step:
    offered_rps: float
    achieved_rps: float
    p50_ms: float
    p99_ms: float
    answered: int
    slo_violations: int
    rejected_429: int
    missing_retry_after: int
    other_errors: int
    server_cpu_us_per_request: float
    client_cpu_us_per_request: float
    instances: list[str]
    batch_sizes: dict[int, int] = field(default_factory=dict)  # answers per batch size
    slo_ms: float = 0.0

    @property
    def kept_up(self) -> bool:
        return self.achieved_rps >= KEEP_UP * self.offered_rps

    @property
    def errors(self) -> int:
        return self.rejected_429 + self.other_errors

    @property
    def passed(self) -> bool:
        return self.kept_up and self.p99_ms <= self.slo_ms and self.errors == 0

    def describe(self) -> dict[str, Any]:
        return asdict(self) | {"kept_up": self.kept_up, "passed": self.passed}


def tree_cpu_s(pid: int) -> float:
    """CPU seconds of a process and everything below it, the exited ones included (a
    reaped worker's time moves into its parent's children counters)."""
    try:
        root = psutil.Process(pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0.0
    for process in tree:
        try:
            t = process.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(value) if isinstance(value, str) else repr(value)


def config_sections() -> str:
    """The shipped config.toml's settings, less what the bench sets itself."""
    shipped = tomllib.loads((REPO_ROOT / "config.toml").read_text(encoding="utf-8"))
    lines: list[str] = []
    for section, values in shipped.items():
        if section in {"gateway", "state", "models", "functions"}:
            continue
        tables = {k: v for k, v in values.items() if isinstance(v, dict)}
        lines.append(f"[{section}]")
        lines += [f"{k} = {_toml_value(v)}" for k, v in values.items() if k not in tables]
        for name, table in tables.items():
            lines.append(f"[{section}.{name}]")
            lines += [f"{k} = {_toml_value(v)}" for k, v in table.items()]
    return "\n".join(lines)


def records(out: Path) -> list[dict[str, str]]:
    with (out / "records.csv").open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def shape_args(rate: float, duration_s: float, ramp_from_rps: float | None = None) -> list[str]:
    """Poisson at `rate` for `duration_s`; with `ramp_from_rps`, a ramp up to `rate`."""
    if ramp_from_rps is None:
        return ["--shape", "poisson", "--rate-rps", str(rate), "--duration-s", str(duration_s)]
    return [
        "--shape",
        "ramp",
        "--rate-rps",
        str(ramp_from_rps),
        "--ramp-to-rps",
        str(rate),
        "--duration-s",
        str(duration_s),
    ]


def run_load(
    gw: Gateway,
    name: str,
    slo_ms: float,
    shape: list[str],
    fmt: str,
    args: argparse.Namespace,
    out: Path,
) -> Step:
    """Drive `name` with the load generator (`shape`: its schedule arguments) and measure."""
    command = [
        sys.executable,
        "-m",
        "loadgen",
        "synthetic",
        "--gateway",
        gw.url,
        "--functions",
        name,
        *shape,
        "--max-requests",
        str(args.max_requests),
        "--seed",
        str(zlib.crc32(out.name.encode())),
        "--no-progress",
        "--out",
        str(out),
    ]
    if fmt != "json":
        command += ["--format", fmt]
    server_before = tree_cpu_s(gw.process.pid)
    client = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    client_cpu = 0.0
    handle = psutil.Process(client.pid)
    while client.poll() is None:
        try:
            times = handle.cpu_times()
            client_cpu = times.user + times.system + times.children_user + times.children_system
        except psutil.NoSuchProcess:
            break
        time.sleep(0.2)
    _, stderr = client.communicate()
    if client.returncode != 0:
        raise RuntimeError(f"loadgen failed: {stderr.decode(errors='replace')[-2000:]}")
    server_cpu = tree_cpu_s(gw.process.pid) - server_before
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))["overall"]
    rows = records(out)
    rejected = [r for r in rows if r.get("status") == "429"]
    latency = summary["latency"]
    instances = gw.get("/system/instances")
    batches = Counter(int(r["batch_size"]) for r in rows if r["status"] == "200")
    return Step(
        offered_rps=summary["offered_rps"],
        achieved_rps=summary["achieved_rps"],
        p50_ms=latency["p50_ms"] or 0.0,
        p99_ms=latency["p99_ms"] or 0.0,
        answered=summary["ok"],
        slo_violations=summary["slo_violations"],
        rejected_429=len(rejected),
        missing_retry_after=sum(1 for r in rejected if not r.get("retry_after_s")),
        other_errors=summary["errors"] - len(rejected),
        server_cpu_us_per_request=server_cpu / max(1, summary["requests"]) * 1e6,
        client_cpu_us_per_request=client_cpu / max(1, summary["requests"]) * 1e6,
        instances=sorted(
            f"b{i['batchSize']}/c{i['cpus']}" for i in instances if i["function"] == name
        ),
        batch_sizes=dict(sorted(batches.items())),
        slo_ms=slo_ms,
    )


def run_step(
    gw: Gateway,
    name: str,
    slo_ms: float,
    rate: float,
    fmt: str,
    args: argparse.Namespace,
    out: Path,
) -> Step:
    """Poisson at `rate` for `args.step_s`."""
    return run_load(gw, name, slo_ms, shape_args(rate, args.step_s), fmt, args, out)


HEADER = (
    f"{'offered':>8} {'achieved':>9} {'p50 ms':>7} {'p99 ms':>7} {'late':>6} {'429':>6} "
    f"{'errors':>6} {'srv us/r':>8} {'cli us/r':>8}  instances"
)


def row(step: Step, slo_ms: float) -> str:
    mark = "" if step.p99_ms <= slo_ms else "  p99 > SLO"
    if not step.kept_up:
        mark += "  (not kept up)"
    return (
        f"{step.offered_rps:8.0f} {step.achieved_rps:9.0f} {step.p50_ms:7.1f} "
        f"{step.p99_ms:7.1f} {step.slo_violations:6d} {step.rejected_429:6d} "
        f"{step.other_errors:6d} {step.server_cpu_us_per_request:8.0f} "
        f"{step.client_cpu_us_per_request:8.0f}  {' '.join(step.instances)}{mark}"
    )


def summarize(steps: list[Step], slo_ms: float) -> dict[str, Any]:
    kept = [s for s in steps if s.kept_up]
    holding = [s for s in kept if s.p99_ms <= slo_ms]
    return {
        "max_rps_within_slo": max((s.offered_rps for s in holding), default=0.0),
        "p99_within_slo_at_every_kept_up_step": len(holding) == len(kept),
        "steps": [s.describe() for s in steps],
    }


def rate_list(text: str) -> tuple[float, ...]:
    return tuple(float(v) for v in text.split(",") if v.strip())

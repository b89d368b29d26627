"""What the live board costs the request path: the gateway's CPU per request at a fixed
request rate with no page open, then with three pages open (each reading `/ui/events`), in
the same run.

One gateway serves mnist (one instance, fixed); an open loop sends `--rate-rps` requests a
second (evenly spaced) for `--seconds`, once per phase, the phases alternating `--rounds`
times (none, three, none, three, ...) so a drift of the machine hits both. Per phase: the
CPU time of the gateway process and of its whole process tree (workers included) over the
requests answered, latency p50/p99, and the snapshots the pages received. Prints a table,
the ratios three/none, and a final JSON line.

    .venv/bin/python -m bench.ui [--rate-rps 200] [--seconds 5] [--rounds 2] [--pages 3]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import psutil

from bench.harness import Gateway, build_models, gateway, percentile_ms
from bench.overhead import sample_body

FUNCTIONS = """
[[functions]]
name = "mnist"
image = "mnist"
slo_ms = 200
max_batch = 8
instances = 1
"""
SETTINGS = '[scaling]\npolicy = "none"\n[ui]\ninterval_s = 1.0\nmax_viewers = 8\n'


@dataclass
class Phase:
    pages: int
    requests: int = 0
    ok: int = 0
    seconds: float = 0.0
    gateway_cpu_s: float = 0.0
    tree_cpu_s: float = 0.0
    snapshots: int = 0  # snapshot events the pages read
    latencies_s: list[float] = field(default_factory=list)

    def add(self, other: Phase) -> None:
        self.requests += other.requests
        self.ok += other.ok
        self.seconds += other.seconds
        self.gateway_cpu_s += other.gateway_cpu_s
        self.tree_cpu_s += other.tree_cpu_s
        self.snapshots += other.snapshots
        self.latencies_s += other.latencies_s

    def summary(self) -> dict[str, float]:
        per = max(1, self.ok)
        return {
            "pages": self.pages,
            "requests": self.requests,
            "ok": self.ok,
            "rps": round(self.ok / self.seconds, 1) if self.seconds else 0.0,
            "gateway_cpu_us_per_request": round(self.gateway_cpu_s / per * 1e6, 1),
            "tree_cpu_us_per_request": round(self.tree_cpu_s / per * 1e6, 1),
            "p50_ms": round(percentile_ms(self.latencies_s, 50), 2),
            "p99_ms": round(percentile_ms(self.latencies_s, 99), 2),
            "snapshots_read": self.snapshots,
        }


def _cpu_s(processes: dict[int, psutil.Process]) -> float:
    total = 0.0
    for process in processes.values():
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            times = process.cpu_times()
            total += times.user + times.system
    return total


def _tree(gw: Gateway) -> dict[int, psutil.Process]:
    root = psutil.Process(gw.process.pid)
    return {p.pid: p for p in [root, *root.children(recursive=True)]}


async def _page(session: aiohttp.ClientSession, url: str, phase: Phase) -> None:
    """One open board: read its event stream (counting snapshots) until cancelled."""
    async with session.get(url + "/ui/events", timeout=aiohttp.ClientTimeout(total=None)) as r:
        if r.status != 200:
            raise RuntimeError(f"/ui/events answered {r.status}: {await r.text()}")
        while line := await r.content.readline():
            phase.snapshots += line.startswith(b"event: snapshot")


async def _phase(gw: Gateway, body: bytes, rate_rps: float, seconds: float, pages: int) -> Phase:
    phase = Phase(pages)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        viewers = [asyncio.ensure_future(_page(session, gw.url, phase)) for _ in range(pages)]
        await asyncio.sleep(1.5)  # the pages are open and have read their first snapshots
        url = f"{gw.url}/function/mnist"
        headers = {"Content-Type": "application/json"}

        async def call(at_s: float) -> None:
            await asyncio.sleep(max(0.0, at_s - time.perf_counter()))
            t0 = time.perf_counter()
            async with session.post(url, data=body, headers=headers) as response:
                await response.read()
                if response.status == 200:
                    phase.ok += 1
                    phase.latencies_s.append(time.perf_counter() - t0)

        count = int(rate_rps * seconds)
        processes = _tree(gw)
        root = processes[gw.process.pid]
        cpu_gateway, cpu_tree = _cpu_s({0: root}), _cpu_s(processes)
        started = time.perf_counter()
        await asyncio.gather(*(call(started + i / rate_rps) for i in range(count)))
        phase.seconds = time.perf_counter() - started
        processes.update(_tree(gw))
        phase.gateway_cpu_s = _cpu_s({0: root}) - cpu_gateway
        phase.tree_cpu_s = _cpu_s(processes) - cpu_tree
        phase.requests = count
        for viewer in viewers:
            if viewer.done():  # a page that ended early: its error
                viewer.result()
            viewer.cancel()
        for viewer in viewers:
            with contextlib.suppress(asyncio.CancelledError):
                await viewer
    return phase


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate-rps", type=float, default=200.0)
    parser.add_argument("--seconds", type=float, default=5.0, help="per phase")
    parser.add_argument("--rounds", type=int, default=2, help="none/pages pairs")
    parser.add_argument("--pages", type=int, default=3)
    args = parser.parse_args()
    build_models("mnist")
    body = sample_body("mnist")
    totals = {0: Phase(0), args.pages: Phase(args.pages)}
    with (
        tempfile.TemporaryDirectory(prefix="bench-ui-") as work,
        gateway(Path(work), FUNCTIONS, SETTINGS) as gw,
    ):
        gw.wait_ready("mnist")
        asyncio.run(_phase(gw, body, args.rate_rps, 2.0, 0))  # warm-up, not counted
        for _ in range(args.rounds):
            for pages in (0, args.pages):
                totals[pages].add(asyncio.run(_phase(gw, body, args.rate_rps, args.seconds, pages)))
    none, some = totals[0].summary(), totals[args.pages].summary()
    print(
        f"{'pages':>5} {'ok':>7} {'rps':>7} {'gw µs/req':>10} {'tree µs/req':>12} "
        f"{'p50 ms':>7} {'p99 ms':>7} {'snapshots':>9}"
    )
    for row in (none, some):
        print(
            f"{row['pages']:>5} {row['ok']:>7} {row['rps']:>7} "
            f"{row['gateway_cpu_us_per_request']:>10} {row['tree_cpu_us_per_request']:>12} "
            f"{row['p50_ms']:>7} {row['p99_ms']:>7} {row['snapshots_read']:>9}"
        )
    ratio_gw = some["gateway_cpu_us_per_request"] / max(1e-9, none["gateway_cpu_us_per_request"])
    ratio_tree = some["tree_cpu_us_per_request"] / max(1e-9, none["tree_cpu_us_per_request"])
    print(
        f"gateway CPU per request, {args.pages} pages / none: {ratio_gw:.3f} "
        f"(process tree: {ratio_tree:.3f})"
    )
    print(
        json.dumps(
            {
                "bench": "ui",
                "rate_rps": args.rate_rps,
                "seconds_per_phase": args.seconds,
                "rounds": args.rounds,
                "none": none,
                "pages": some,
                "gateway_cpu_ratio": round(ratio_gw, 3),
                "tree_cpu_ratio": round(ratio_tree, 3),
            }
        )
    )


if __name__ == "__main__":
    main()

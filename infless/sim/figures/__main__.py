"""`python -m infless.sim.figures FIGURE...`: compute the figures, write their PNGs, print them.

    python -m infless.sim.figures fig17 fig11 table4 fig15 --out docs/figures

Each figure prints as a Markdown table (for docs/reproduction.md), then its PNG is written
to `--out/<name>.png`; the last line is one JSON object with every figure's rows. `--small`
runs each on a small configuration in seconds (the tests do). Torch-free.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

import msgspec

from infless.sim.command import servers, truth_and_planner
from infless.sim.figures import cost, overhead, throughput
from infless.sim.figures.table import Rows, markdown, write_png
from infless.sim.latency import load_zoo
from infless.sim.settings import SimConfig

FIGURES = ("fig17", "fig11", "table4", "fig15")


def _scale(small: bool) -> SimConfig:
    """INFless §5.3's simulated cluster (2,000 servers of 16 cores + 2 GPUs), or a small one."""
    if small:
        return SimConfig(servers=20, gpus_per_server=2, mode="fluid", duration_s=10.0, step_s=0.5)
    return SimConfig(servers=2000, gpus_per_server=2, mode="fluid", duration_s=30.0, step_s=0.25)


def build(name: str, small: bool) -> Rows:
    """The figure called `name`, at full scale or `small`."""
    cfg = _scale(small)
    models = load_zoo().models
    functions = 10 if small else 40
    if name == "fig17":
        _, planner = truth_and_planner(cfg)
        counts = (50, 100) if small else (1000, 2500, 5000, 10_000)
        return overhead.fig17(servers(cfg), planner, cfg.scaling, models, counts, functions)
    if name == "fig11":
        if small:
            cluster = throughput.local_cluster(duration_s=5.0)
            return throughput.fig11(cluster, ("infless", "batch"))
        return throughput.fig11()
    if name == "table4":
        return cost.table4(cfg, models, 100 if small else 10_000, functions)
    # Fig. 15: twelve runs, so on a tenth of the cluster and of the instances (minutes)
    if not small:
        cfg = msgspec.structs.replace(cfg, servers=cfg.servers // 10)
    return cost.fig15(cfg, models, 100 if small else 1000, functions)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infless.sim.figures", description=__doc__)
    parser.add_argument("figures", nargs="+", choices=FIGURES, metavar="FIGURE")
    parser.add_argument("--out", type=Path, default=Path("docs/figures"), help="PNG directory")
    parser.add_argument("--small", action="store_true", help="a small configuration, seconds")
    args = parser.parse_args(argv)
    found: dict[str, object] = {}
    for name in args.figures:
        rows = build(name, args.small)
        print(f"## {rows.title}\n\n{markdown(rows)}\n")
        write_png(rows, args.out / f"{rows.name}.png")
        found[rows.name] = [dict(row) for row in rows.rows]
    print(json.dumps({"figures": found}, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

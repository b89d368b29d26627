"""`python -m infless.sim.figures FIGURE...`: compute the figures, write their PNGs, print them.

    python -m infless.sim.figures fig17 fig11 fig11_reserve table4 fig15 conditions \\
        --out docs/figures
    python -m infless.sim.figures tetris_fig9 tetris_fig13 infaas sharing_placement \\
        --out docs/figures
    python -m infless.sim.figures dts --out docs/figures

Each figure prints as a Markdown table (for docs/reproduction.md), then its PNG is written
to `--out/<name>.png`; the last line is one JSON object with every figure's rows. `--small`
runs each on a small configuration in seconds (the tests do). Torch-free.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import msgspec

from infless.extras import PLOTS, has_module, missing_extra_message
from infless.sim import mixes
from infless.sim.command import servers, truth_and_planner
from infless.sim.figures import conditions, cost, dts, infaas, overhead, tetris, throughput
from infless.sim.figures.table import Rows, markdown, write_png
from infless.sim.latency import load_zoo
from infless.sim.settings import SimConfig

DTS_SERVERS, DTS_INSTANCES, DTS_SEEDS = 200, 1000, (1, 2)  # the medium configuration


def _scale(small: bool) -> SimConfig:
    """INFless §5.3's simulated cluster (2,000 servers of 16 cores + 2 GPUs), or a small one."""
    if small:
        return SimConfig(servers=20, gpus_per_server=2, mode="fluid", duration_s=10.0, step_s=0.5)
    return SimConfig(servers=2000, gpus_per_server=2, mode="fluid", duration_s=30.0, step_s=0.25)


def _scale_models() -> list[str]:
    """The measured models the scale figures run (`mixes.scale_models`)."""
    return mixes.scale_models(load_zoo().models)


def _fig17(small: bool) -> Rows:
    cfg = _scale(small)
    _, planner = truth_and_planner(cfg)
    counts = (50, 100) if small else (1000, 2500, 5000, 10_000)
    functions = 10 if small else 40
    return overhead.fig17(servers(cfg), planner, cfg.scaling, _scale_models(), counts, functions)


def _fig11(small: bool) -> Rows:
    if small:
        return throughput.fig11(throughput.local_cluster(duration_s=5.0), ("infless", "batch"))
    return throughput.fig11()


def _fig11_reserve(small: bool) -> Rows:
    """Fig. 11 with 2 cores per server kept for its GPUs (`scaling.gpu_core_reserve`)."""
    cluster = throughput.local_cluster(duration_s=5.0 if small else 20.0)
    policies = ("infless", "batch") if small else ("openfaas+", "batch", "infless", "infless-nors")
    return throughput.fig11(throughput.with_core_reserve(cluster, 2), policies)


def _table4(small: bool) -> Rows:
    return cost.table4(
        _scale(small), _scale_models(), 100 if small else 10_000, 10 if small else 40
    )


def _fig15(small: bool) -> Rows:
    """Twelve runs: on a tenth of the cluster and of the instances at full scale (minutes)."""
    cfg = _scale(small)
    if not small:
        cfg = msgspec.structs.replace(cfg, servers=cfg.servers // 10)
    return cost.fig15(cfg, _scale_models(), 100 if small else 1000, 10 if small else 40)


def _conditions(small: bool) -> Rows:
    if small:
        few = SimConfig(servers=4, mode="fluid", duration_s=5.0, step_s=0.5)
        return conditions.advantage(_scale_models(), few, conditions.CASES[:2])
    return conditions.advantage(_scale_models())


def _tetris_fig9(small: bool) -> Rows:
    return tetris.fig9(load_zoo().memory, (2, 32) if small else tetris.INSTANCES)


def _tetris_fig13(small: bool) -> Rows:
    servers_count, rate_rps = (4, 3000.0) if small else (16, 40_000.0)
    cfg = SimConfig(
        servers=servers_count, mode="fluid", duration_s=10.0 if small else 60.0, step_s=0.25
    )
    return tetris.fig13(cfg, rate_rps)


def _sharing(small: bool) -> Rows:
    servers_count, instances = (10, 50) if small else (200, 1000)
    cfg = msgspec.structs.replace(_scale(small), servers=servers_count)
    return tetris.sharing_placement(cfg, _scale_models(), instances, functions=10 if small else 40)


def _dts(small: bool) -> Rows:
    """The sharing figure's cluster and mix under INFless, INFless with affinity, and DTS."""
    servers_count, instances = (10, 50) if small else (DTS_SERVERS, DTS_INSTANCES)
    cfg = msgspec.structs.replace(_scale(small), servers=servers_count)
    functions, seeds = (10, (1,)) if small else (40, DTS_SEEDS)
    return dts.compare(cfg, _scale_models(), instances, functions, seeds)


def _infaas(small: bool) -> Rows:
    cfg = SimConfig(servers=8, duration_s=30.0 if small else 80.0, exec_jitter=0.05)
    return infaas.fig_modelless(cfg, (1,) if small else (1, 2, 3))


BUILDERS: dict[str, Callable[[bool], Rows]] = {
    "fig17": _fig17,
    "fig11": _fig11,
    "fig11_reserve": _fig11_reserve,
    "table4": _table4,
    "fig15": _fig15,
    "conditions": _conditions,
    "tetris_fig9": _tetris_fig9,
    "tetris_fig13": _tetris_fig13,
    "infaas": _infaas,
    "sharing_placement": _sharing,
    "dts": _dts,
}
FIGURES = tuple(BUILDERS)


def build(name: str, small: bool) -> Rows:
    """The figure called `name`, at full scale or `small`."""
    return BUILDERS[name](small)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infless.sim.figures", description=__doc__)
    parser.add_argument("figures", nargs="+", choices=FIGURES, metavar="FIGURE")
    parser.add_argument("--out", type=Path, default=Path("docs/figures"), help="PNG directory")
    parser.add_argument("--small", action="store_true", help="a small configuration, seconds")
    args = parser.parse_args(argv)
    if not has_module("matplotlib"):
        print(missing_extra_message("matplotlib", PLOTS, "drawing figures"), file=sys.stderr)
        return 2
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

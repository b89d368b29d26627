"""Tetris Figure 9(a) (memory saved by tensor sharing vs instances per server) and the
sharing part of Figure 13 (mean, median and peak memory of an application's run, with the
store and without it).

Figure 9(a) is Tetris's own formula (M_ts = M_tensor + I × M_others against
I × (M_tensor + M_others)) over the models profiled here (`sim.memory.reduction`), plus the
paper's VGG19 (549 MB of tensors, 95.4 MB else) as a check on the formula. Figure 13's
sharing part: INFless's runs of the Q&A robot, each under a stable, periodic and bursty
load, with the memory the store shares counted and with every instance holding its own
weights. Its DTS part (memory in the planner's objective) is `sim.figures.dts`. Pure: the
runs are simulations.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import msgspec

from infless.sim import mixes
from infless.sim.command import servers, simulate_policy, truth_and_planner
from infless.sim.figures.table import Cell, Rows, bars
from infless.sim.memory import MIB, ModelMemory, reduction
from infless.sim.settings import SimConfig

if TYPE_CHECKING:
    from matplotlib.figure import Figure as PlotFigure

INSTANCES = (2, 4, 8, 16, 32)
# Tetris §5.2: VGG19's tensors and the rest of an instance's memory
PAPER_VGG19 = ModelMemory(
    weight_bytes=int(549 * MIB), activation_bytes_per_sample=0, runtime_bytes=int(95.4 * MIB)
)


def fig9(memory: Mapping[str, ModelMemory], instances: Sequence[int] = INSTANCES) -> Rows:
    """Rows of (model, instances on one server, memory saved), batch size 1."""
    models = {**memory, "vgg19 (Tetris's figures)": PAPER_VGG19}
    rows: list[dict[str, Cell]] = []
    for name, model in models.items():
        for count in instances:
            rows.append(
                {
                    "model": name,
                    "instances": count,
                    "tensor_mib": round(model.weight_bytes / MIB, 1),
                    "other_mib": round(model.private_bytes(1) / MIB, 1),
                    "reduction": round(reduction(model, count), 4),
                }
            )
    title = "Tetris Fig. 9(a): memory saved by sharing tensors, one server"
    return Rows("tetris_fig9", title, tuple(rows[0]), tuple(rows), _plot_reduction)


def _plot_reduction(rows: Rows, figure: PlotFigure) -> None:
    ax = figure.add_subplot(1, 1, 1)
    for model in dict.fromkeys(str(r["model"]) for r in rows.rows):
        ax.plot(
            rows.values("instances", model=model),
            rows.values("reduction", model=model),
            marker="o",
            label=model,
        )
    ax.set_xscale("log", base=2)
    ax.set_xlabel("instances of one function on a server")
    ax.set_ylabel("memory saved")
    ax.legend()
    ax.grid(alpha=0.3)


def fig13(
    cfg: SimConfig,
    total_rps: float,
    shapes: Sequence[mixes.Shape] = ("constant", "periodic", "bursty"),
) -> Rows:
    """Rows of (load shape, mean/median/peak MiB with the store, mean without, saved)."""
    rows: list[dict[str, Cell]] = []
    for shape in shapes:
        mix = mixes.qa(total_rps, cfg.duration_s, shape)
        _, result = simulate_policy(mix, cfg, "infless")
        usage = result.usage
        unshared = usage.unshared_mean_mib
        saved = 1.0 - usage.memory_mean_mib / unshared if unshared else 0.0
        rows.append(
            {
                "shape": shape,
                "mean_mib": round(usage.memory_mean_mib, 1),
                "median_mib": round(usage.memory_median_mib, 1),
                "peak_mib": round(usage.memory_peak_mib, 1),
                "unshared_mean_mib": round(usage.unshared_mean_mib, 1),
                "saved": round(saved, 4),
            }
        )
    title = f"Tetris Fig. 13 (sharing only): Q&A robot under INFless, {cfg.servers} servers"
    return Rows("tetris_fig13", title, tuple(rows[0]), tuple(rows), _plot_memory)


def sharing_placement(
    cfg: SimConfig,
    models: Sequence[str],
    instances: int,
    weights: Sequence[float] = (0.0, 0.5, 2.0),
    functions: int = 40,
) -> Rows:
    """Rows of (affinity weight, memory per 100 RPS with the store, violations, cores):
    the 40-function mix under INFless with the servers reporting the store's affinity
    (`SimConfig.store_affinity`) and the planner weighing it (`scaling.affinity_weight`)."""
    mix = mixes.sized(
        mixes.scale_mix(functions, 1000.0, cfg.duration_s, mixes.SHAPES, models),
        instances,
        servers(cfg),
        truth_and_planner(cfg)[1],
        cfg.scaling,
    )
    rows: list[dict[str, Cell]] = []
    for weight in weights:
        scaling = msgspec.structs.replace(cfg.scaling, affinity_weight=weight)
        run_cfg = msgspec.structs.replace(cfg, store_affinity=weight > 0, scaling=scaling)
        _, result = simulate_policy(mix, run_cfg, "infless")
        usage, served = result.usage, result.served_rps
        rows.append(
            {
                "affinity_weight": weight,
                "mib_per_100_rps": round(100 * usage.memory_mean_mib / served, 3) if served else 0,
                "unshared_mib_per_100_rps": round(100 * usage.unshared_mean_mib / served, 3)
                if served
                else 0,
                "violation_rate": round(result.violation_rate, 4),
                "cpus_per_100_rps": round(result.cores_per_100_rps, 3),
                "active_servers": round(usage.active_servers, 1),
            }
        )
    title = f"Memory in the placement: the store's affinity weighed, {cfg.servers} servers"
    return Rows("sharing_placement", title, tuple(rows[0]), tuple(rows), _plot_sharing)


def _plot_sharing(rows: Rows, figure: PlotFigure) -> None:
    labels = [f"weight {r['affinity_weight']}" for r in rows.rows]
    bars(figure, 1, labels, rows.values("mib_per_100_rps"), "MiB held per 100 RPS (shared)")
    bars(figure, 2, labels, [100 * v for v in rows.values("violation_rate")], "SLO violations (%)")


def _plot_memory(rows: Rows, figure: PlotFigure) -> None:
    ax = figure.add_subplot(1, 1, 1)
    shapes = [str(r["shape"]) for r in rows.rows]
    xs = list(range(len(shapes)))
    for shift, column in ((-0.2, "mean_mib"), (0.2, "unshared_mean_mib")):
        ax.bar([x + shift for x in xs], rows.values(column), 0.4, label=column)
    ax.set_xticks(xs, shapes)
    ax.set_ylabel("memory (MiB)")
    ax.legend()
    ax.grid(axis="y", alpha=0.3)

"""Presenting an `EvalResult`: rich tables, the LSTH-vs-HHP summary, JSON and the PNG plot.

Owns: formatting only. Must not compute metrics (that is `evaluate.py`) nor parse arguments
(that is `commands.py`). `write_plot` is the only function that touches the filesystem;
matplotlib is imported inside it, with the Agg backend.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from infless.offline.coldstart.evaluate import EvalResult, Metrics, PolicyResult

_LABELS = {"keepalive_min": "keep-alive {:g} min", "range_h": "range {:g} h", "gamma": "γ={:g}"}
_COLOURS = {"fixed": "tab:gray", "hhp": "tab:blue", "lsth": "tab:red"}


def param_label(result: PolicyResult, param: float) -> str:
    return _LABELS[result.param_name].format(param)


def metrics_table(evaluation: EvalResult, title: str) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("policy")
    table.add_column("parameter")
    for heading in (
        "cold-start rate %",
        "Q3 fn cold %",
        "median fn cold %",
        "p90 fn cold %",
        "wasted GB·s",
        "waste vs fixed-10 %",
        "loads",
    ):
        table.add_column(heading, justify="right")
    for result in evaluation.results.values():
        for point in result.curve:
            headline = point.param == result.headline_param
            table.add_row(
                result.policy,
                param_label(result, point.param),
                *_cells(point.metrics),
                style="bold" if headline else "dim",
            )
    return table


def class_table(evaluation: EvalResult) -> Table:
    table = Table(title="headline configurations by pattern class", title_justify="left")
    table.add_column("class")
    table.add_column("functions", justify="right")
    for result in evaluation.results.values():
        name = f"{result.policy} ({param_label(result, result.headline_param)})"
        table.add_column(f"{name}\ncold % / Q3 fn % / waste %", justify="right")
    for cls, size in evaluation.class_sizes.items():
        if size == 0:
            continue
        cells = []
        for result in evaluation.results.values():
            m = result.by_class.get(cls)
            cells.append(
                "-"
                if m is None
                else f"{100 * m.cold_start_rate:.3f} / {m.q3_function_cold_start_pct:.1f}"
                f" / {m.wasted_memory_normalized_pct:.0f}"
            )
        table.add_row(cls, str(size), *cells)
    return table


def _cells(m: Metrics) -> list[str]:
    return [
        f"{100 * m.cold_start_rate:.4f}",
        f"{m.q3_function_cold_start_pct:.2f}",
        f"{m.median_function_cold_start_pct:.2f}",
        f"{m.p90_function_cold_start_pct:.2f}",
        f"{m.wasted_memory_gb_s:.4g}",
        f"{m.wasted_memory_normalized_pct:.1f}",
        str(m.loads),
    ]


def comparison_lines(evaluation: EvalResult) -> list[str]:
    """LSTH (every γ) against HHP's headline: relative cold starts and waste."""
    results = evaluation.results
    if "lsth" not in results or "hhp" not in results:
        return []
    hhp = results["hhp"].headline
    lines = [
        f"LSTH vs HHP ({param_label(results['hhp'], results['hhp'].headline_param)}); "
        "target: cold starts <= -20 % at waste <= 0 %"
    ]
    for point in results["lsth"].curve:
        m = point.metrics
        lines.append(
            f"  {param_label(results['lsth'], point.param):>6}: cold starts "
            f"{_delta(m.cold_starts, hhp.cold_starts)}, wasted memory-time "
            f"{_delta(m.wasted_memory_gb_s, hhp.wasted_memory_gb_s)}, Q3 fn cold "
            f"{m.q3_function_cold_start_pct:.2f} % vs {hhp.q3_function_cold_start_pct:.2f} %"
        )
    return lines


def _delta(value: float, base: float) -> str:
    return f"{100.0 * (value / base - 1.0):+.1f} %" if base else "n/a"


def to_json(evaluation: EvalResult) -> dict[str, Any]:
    """One object keyed by policy name: headline metrics, config, curve and classes."""
    out: dict[str, Any] = {}
    for name, result in evaluation.results.items():
        entry: dict[str, Any] = asdict(result.headline)
        entry[result.param_name] = result.headline_param
        entry["curve"] = [{result.param_name: p.param, **asdict(p.metrics)} for p in result.curve]
        entry["by_class"] = {c: asdict(m) for c, m in result.by_class.items()}
        out[name] = finite(entry)
    return out


def finite(value: Any) -> Any:
    """NaN (e.g. waste normalised to a zero reference) becomes null, so the JSON is strict."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return value


def write_plot(evaluation: EvalResult, path: Path) -> None:
    """Trade-off curves: Q3 per-function and global cold-start rate vs normalised waste."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    for result in evaluation.results.values():
        xs = [p.metrics.wasted_memory_normalized_pct for p in result.curve]
        colour = _COLOURS.get(result.policy)
        panels = (
            [p.metrics.q3_function_cold_start_pct for p in result.curve],
            [100.0 * p.metrics.cold_start_rate for p in result.curve],
        )
        for ax, ys in zip(axes, panels, strict=True):
            ax.plot(xs, ys, marker="o", color=colour, label=result.policy)
            for point, x, y in zip(result.curve, xs, ys, strict=True):
                ax.annotate(
                    f"{point.param:g}",
                    (x, y),
                    textcoords="offset points",
                    xytext=(4, 4),
                    fontsize=7,
                    color=colour,
                )
                if point.param == result.headline_param:
                    ax.plot([x], [y], marker="*", markersize=14, color=colour)
    axes[0].set_ylabel("3rd quartile function cold start (%)")
    axes[1].set_ylabel("global cold-start rate (%)")
    for ax in axes:
        ax.set_xlabel("wasted memory-time, normalised to fixed 10 min (%)")
        ax.grid(alpha=0.3)
        ax.legend(title="★ headline; labels: min / h / γ")
    fig.suptitle(
        f"Cold-start trade-offs: {evaluation.functions} functions, "
        f"{evaluation.invocations:,} invocations"
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def print_report(evaluation: EvalResult, console: Console, title: str) -> None:
    console.print(metrics_table(evaluation, title))
    console.print(class_table(evaluation))
    for line in comparison_lines(evaluation):
        console.print(line, highlight=False)

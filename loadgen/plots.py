"""PNG plots of a run (matplotlib): one function per figure, each writes one PNG file.

Owns drawing only: every number comes from `stats`; never reads the network or the clock.
Uses `Figure` objects directly (Agg via savefig), never pyplot, so no global backend state.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from matplotlib.figure import Figure

from loadgen.records import InstanceSample, RequestRecord
from loadgen.stats import (
    OVERALL,
    FunctionSummary,
    instance_series,
    latency_cdf,
    rate_series,
)

DPI = 100
FIGSIZE = (9.0, 4.5)


def _save(fig: Figure, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=DPI, format="png")
    return path


def _functions(summaries: Mapping[str, FunctionSummary]) -> list[str]:
    return [name for name in summaries if name != OVERALL]


def plot_latency_cdf(
    path: Path, records: Sequence[RequestRecord], summaries: Mapping[str, FunctionSummary]
) -> Path:
    fig = Figure(figsize=FIGSIZE)
    ax = fig.subplots()
    drawn = False
    for i, name in enumerate(_functions(summaries)):
        color = f"C{i % 10}"
        latencies = [r.latency_ms for r in records if r.function == name and r.ok]
        if latencies:
            xs, ys = latency_cdf(latencies)
            ax.step(xs, ys, where="post", color=color, label=f"{name} (n={len(xs)})")
            drawn = True
        slo_ms = summaries[name].slo_ms
        if slo_ms is not None:
            ax.axvline(
                slo_ms, color=color, linestyle="--", linewidth=1, label=f"{name} SLO {slo_ms:g} ms"
            )
    if drawn:
        ax.set_xscale("log")
    else:
        ax.text(0.5, 0.5, "no successful requests", ha="center", transform=ax.transAxes)
    ax.set_xlabel("latency (ms, log scale)")
    ax.set_ylabel("fraction of successful requests")
    ax.set_ylim(0, 1.02)
    ax.set_title("Latency CDF per function (dashed: SLO)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _save(fig, path)


def plot_rates(
    path: Path,
    records: Sequence[RequestRecord],
    samples: Sequence[InstanceSample],
    window_s: float,
) -> Path:
    fig = Figure(figsize=FIGSIZE)
    ax = fig.subplots()
    starts, offered, achieved = rate_series(records, window_s)
    edges = [*starts, starts[-1] + (starts[1] - starts[0] if len(starts) > 1 else 1.0)]
    ax.stairs(offered, edges, linewidth=2.5, label="offered rps (by send time)")
    ax.stairs(achieved, edges, label="achieved rps (200s, by completion)")
    ax.set_xlabel("time since start (s)")
    ax.set_ylabel("requests per second")
    ax.grid(True, alpha=0.3)
    times, ready = instance_series(samples)
    lines, labels = ax.get_legend_handles_labels()
    if times:
        ax2 = ax.twinx()
        ax2.step(times, ready, where="post", color="C3", linestyle=":", label="ready instances")
        ax2.set_ylabel("instances (ready)")
        ax2.set_ylim(0, max([*ready, 1]) + 1)
        more_lines, more_labels = ax2.get_legend_handles_labels()
        lines, labels = lines + more_lines, labels + more_labels
    ax.legend(lines, labels, fontsize="small", loc="upper left")
    ax.set_title("Offered vs achieved rate, with instance count")
    return _save(fig, path)


def plot_breakdown(path: Path, summaries: Mapping[str, FunctionSummary]) -> Path:
    names = list(summaries)
    fig = Figure(figsize=FIGSIZE)
    ax = fig.subplots()
    parts = [
        ("cold start", [summaries[n].breakdown.cold_start_ms for n in names]),
        ("queue", [summaries[n].breakdown.queue_ms for n in names]),
        ("exec", [summaries[n].breakdown.exec_ms for n in names]),
        ("other (HTTP, gateway)", [summaries[n].breakdown.other_ms for n in names]),
    ]
    bottoms = [0.0] * len(names)
    for label, values in parts:
        clean = [0.0 if math.isnan(v) else v for v in values]
        ax.bar(names, clean, bottom=bottoms, label=label)
        bottoms = [b + v for b, v in zip(bottoms, clean, strict=True)]
    ax.set_ylabel("mean ms per successful request")
    ax.set_title("Latency breakdown (means; bars stack to the mean latency)")
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(True, axis="y", alpha=0.3)
    return _save(fig, path)


def plot_violations(path: Path, summaries: Mapping[str, FunctionSummary]) -> Path:
    names = list(summaries)
    rates = [summaries[n].slo_violation_rate for n in names]
    clean = [0.0 if math.isnan(r) else 100.0 * r for r in rates]
    fig = Figure(figsize=FIGSIZE)
    ax = fig.subplots()
    bars = ax.bar(names, clean, color=["C3" if n != OVERALL else "C7" for n in names])
    for bar, summary in zip(bars, (summaries[n] for n in names), strict=True):
        ax.annotate(
            f"{summary.slo_violations}/{summary.requests}",
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
            fontsize="small",
        )
    ax.set_ylabel("SLO violations (% of requests)")
    ax.set_ylim(0, max([*clean, 1.0]) * 1.15)
    ax.set_title("SLO-violation rate per function (late or failed)")
    ax.grid(True, axis="y", alpha=0.3)
    return _save(fig, path)


def plot_batch_sizes(path: Path, summaries: Mapping[str, FunctionSummary]) -> Path:
    names = _functions(summaries)
    sizes = sorted({int(k) for n in names for k in summaries[n].batch_sizes})
    fig = Figure(figsize=FIGSIZE)
    ax = fig.subplots()
    if not sizes:
        ax.text(0.5, 0.5, "no batch-size headers recorded", ha="center", transform=ax.transAxes)
    width = 0.8 / max(len(names), 1)
    for i, name in enumerate(names):
        counts = summaries[name].batch_sizes
        total = sum(counts.values()) or 1
        xs = [s + (i - (len(names) - 1) / 2) * width for s in sizes]
        ax.bar(xs, [100.0 * counts.get(str(s), 0) / total for s in sizes], width=width, label=name)
    ax.set_xticks(sizes)
    ax.set_xlabel("batch size the request ran in")
    ax.set_ylabel("% of the function's successful requests")
    ax.set_title("Batch-size distribution")
    if sizes:
        ax.legend(fontsize="small")
    ax.grid(True, axis="y", alpha=0.3)
    return _save(fig, path)


def plot_max_rate(
    path: Path,
    offered_rps: Sequence[float],
    p99_ms: Sequence[float],
    achieved_rps: Sequence[float],
    passed: Sequence[bool],
    slo_ms: float | None,
) -> Path:
    fig = Figure(figsize=(10.0, 4.5))
    ax1, ax2 = fig.subplots(1, 2)
    colors = ["C2" if ok else "C3" for ok in passed]
    ax1.scatter(offered_rps, [0.0 if math.isnan(p) else p for p in p99_ms], c=colors)
    if slo_ms is not None:
        ax1.axhline(slo_ms, color="C3", linestyle="--", label=f"SLO {slo_ms:g} ms")
        ax1.legend(fontsize="small")
    ax1.set_xlabel("offered rps")
    ax1.set_ylabel("p99 latency (ms)")
    ax1.set_title("p99 per step (green: passed)")
    top = max([*offered_rps, *achieved_rps, 1.0])
    ax2.plot([0, top], [0, top], color="C7", linestyle=":", label="achieved = offered")
    ax2.scatter(offered_rps, achieved_rps, c=colors)
    ax2.set_xlabel("offered rps")
    ax2.set_ylabel("achieved rps")
    ax2.set_title("Throughput per step")
    ax2.legend(fontsize="small")
    for ax in (ax1, ax2):
        ax.grid(True, alpha=0.3)
    return _save(fig, path)

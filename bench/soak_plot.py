"""The soak's figure (`bench.soak`): four panels over the run's minutes — resident memory
(gateway, workers per instance, templates, zygote and helpers), open file descriptors (the
quiet samples growth is read on marked), the tensor store's size, and requests per window by
outcome — with the schedule's events as vertical lines (kills red, churn grey). Drawing
only: every number comes from `soak_measure`; uses `Figure` directly (Agg via savefig),
never pyplot.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from bench.soak_measure import Sample
from bench.soak_schedule import Event


def _minutes(samples: Sequence[Sample]) -> list[float]:
    return [s.at_s / 60.0 for s in samples]


def _events(axes: Axes, events: Sequence[Event]) -> None:
    for event in events:
        color = "tab:red" if event.kind == "kill" else "0.7"
        axes.axvline(event.at_s / 60.0, color=color, linewidth=0.6, alpha=0.6)


def plot_soak(
    path: Path,
    samples: Sequence[Sample],
    outcomes: Sequence[tuple[float, dict[str, int]]],
    events: Sequence[Event],
) -> Path:
    fig = Figure(figsize=(10.0, 10.0))
    memory, descriptors, store, requests = fig.subplots(4, 1, sharex=True)
    t = _minutes(samples)

    memory.plot(t, [s.rss_mib["gateway"] for s in samples], label="gateway")
    memory.plot(
        t,
        [sum(s.workers_rss_mib) / max(1, len(s.workers_rss_mib)) for s in samples],
        label="worker (mean per instance)",
    )
    memory.plot(t, [s.rss_mib["template"] for s in samples], label="templates")
    memory.plot(t, [s.rss_mib["helper"] for s in samples], label="zygote, helpers, starting")
    memory.set_ylabel("RSS (MiB)")

    descriptors.plot(t, [s.fds["gateway"] for s in samples], label="gateway")
    descriptors.plot(t, [sum(s.fds.values()) for s in samples], label="all processes")
    descriptors.plot(t, [sum(s.processes.values()) for s in samples], label="processes")
    descriptors.set_ylabel("open fds / processes")

    store.plot(t, [s.store_mib for s in samples], label="MiB")
    store.plot(t, [s.store_files for s in samples], label="files")
    store.set_ylabel("tensor store")

    starts = [at_s / 60.0 for at_s, _ in outcomes]
    for kind, color in (("ok", "tab:green"), ("rejected", "tab:orange"), ("error", "tab:red")):
        requests.plot(starts, [c[kind] for _, c in outcomes], label=kind, color=color)
    requests.set_ylabel("requests per window")
    requests.set_xlabel("minutes")

    for axes in (memory, descriptors, store, requests):
        _events(axes, events)
        axes.legend(loc="upper left", fontsize="small")
        axes.grid(alpha=0.3)
    quiet = [s.at_s / 60.0 for s in samples if s.quiet]
    descriptors.plot(
        quiet, [sum(s.fds.values()) for s in samples if s.quiet], "o", label="quiet samples"
    )
    fig.suptitle("infless soak: memory, descriptors, store and outcomes (kills red, churn grey)")
    fig.tight_layout()
    fig.savefig(path, dpi=100, format="png")
    return path

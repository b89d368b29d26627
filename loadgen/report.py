"""The report directory: summary.json, report.md, records.csv, instances.csv and PNG plots.

Owns the files of one report; the numbers come from `stats`, the pictures from `plots`.
Never talks to the network or reads the clock (the run's start time is passed in).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import orjson

from loadgen import plots
from loadgen.auth import AUTH_FLAGS, TOKEN_FLAG
from loadgen.maxrate import SearchState
from loadgen.records import InstanceSample, RequestRecord, write_instances_csv, write_records_csv
from loadgen.stats import OVERALL, FunctionSummary, summarize, summary_to_json

CLOSED_LOOP_LAG = "not applicable: closed loop (each client sends when its previous answer arrives)"

PLOT_FILES: tuple[str, ...] = (
    "latency_cdf.png",
    "rps_over_time.png",
    "latency_breakdown.png",
    "slo_violations.png",
    "batch_sizes.png",
)
MAX_RATE_PLOT = "max_rate.png"
CLIENT_LAG_WARN_MS = 10.0
MIN_STEP_REQUESTS = 100  # below this a step's p99 is nearly its maximum


@dataclass(frozen=True, slots=True)
class RunInfo:
    kind: str  # "replay", "synthetic", "max-rate"
    gateway: str
    schedule: str  # the workload's description
    seed: int
    started_at: str  # ISO 8601, wall clock, given by the shell
    window_s: float
    elapsed_s: float
    scheduled: int
    not_sent: int
    dropped_by_cap: int
    connection_limit: int
    command: str
    requests: str = ""  # what was sent, e.g. "json bodies on /function/{name}"
    closed_loop: bool = False  # no schedule: send lag does not apply


def _fmt(value: float | None, digits: int = 1) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value:.{digits}f}"


def _table(summaries: Mapping[str, FunctionSummary]) -> list[str]:
    lines = [
        "| function | SLO ms | requests | ok | errors | offered rps | achieved rps | p50 ms "
        "| p90 ms | p99 ms | max ms | SLO viol. | cold starts | queue ms | exec ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, s in summaries.items():
        lat = s.latency
        lines.append(
            f"| {name} | {_fmt(s.slo_ms, 0)} | {s.requests} | {s.ok} | {s.errors} "
            f"| {_fmt(s.offered_rps, 2)} | {_fmt(s.achieved_rps, 2)} | {_fmt(lat.p50_ms)} "
            f"| {_fmt(lat.p90_ms)} | {_fmt(lat.p99_ms)} | {_fmt(lat.max_ms)} "
            f"| {_fmt(100 * s.slo_violation_rate)} % | {s.cold_starts} | {_fmt(s.queue_ms_mean)} "
            f"| {_fmt(s.exec_ms_mean)} |"
        )
    return lines


def _lag(info: RunInfo, overall: FunctionSummary) -> str:
    if info.closed_loop:
        return CLOSED_LOOP_LAG
    return f"{_fmt(overall.send_lag_ms_p99, 2)} ms (send time minus scheduled time)"


def _warnings(info: RunInfo, summaries: Mapping[str, FunctionSummary]) -> list[str]:
    notes: list[str] = []
    overall = summaries[OVERALL]
    if info.dropped_by_cap:
        notes.append(
            f"{info.dropped_by_cap} scheduled requests were cut by the count/duration cap."
        )
    if info.not_sent:
        notes.append(f"{info.not_sent} requests were not sent: the duration cap ran out.")
    unauthorized = overall.errors_by_status.get("401", 0)
    if unauthorized:
        notes.append(
            f"{unauthorized} requests were refused with HTTP 401 (unauthorized): pass "
            f"{TOKEN_FLAG} or {AUTH_FLAGS}."
        )
    if overall.send_lag_ms_p99 > CLIENT_LAG_WARN_MS:
        notes.append(
            f"The client fell behind its schedule (p99 send lag {overall.send_lag_ms_p99:.1f} ms):"
            " the offered load was lower and burstier than planned."
        )
    for name, s in summaries.items():
        if s.errors:
            notes.append(
                f"{name}: errors by status {s.errors_by_status}, by code {s.errors_by_code}."
            )
    return notes


def _markdown(
    info: RunInfo,
    summaries: Mapping[str, FunctionSummary],
    plot_files: Sequence[str],
    search: SearchState | None,
) -> str:
    lines = [
        f"# Load report: {info.kind}",
        "",
        f"- gateway: `{info.gateway}`",
        f"- workload: {info.schedule}",
        f"- started: {info.started_at}; window {info.window_s:.1f} s; "
        f"elapsed {info.elapsed_s:.1f} s",
        f"- requests {'sent' if info.closed_loop else 'scheduled'}: {info.scheduled}; "
        f"connection limit {info.connection_limit}; "
        f"seed {info.seed}",
        *([f"- requests: {info.requests}"] if info.requests else []),
        f"- send lag p99: {_lag(info, summaries[OVERALL])}",
        f"- command: `{info.command}`",
        "",
        "## Summary",
        "",
        *_table(summaries),
        "",
    ]
    if search is not None:
        best = search.result_rps
        lines += [
            "## Max-rate search",
            "",
            f"**Maximum sustainable rate: {_fmt(best, 1)} rps** "
            "(p99 <= SLO, no errors, achieved >= 97 % of offered).",
            "",
            "| step | target rps | offered rps | achieved rps | p99 ms | requests | errors "
            "| verdict |",
            "|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        for i, step in enumerate(search.steps, start=1):
            verdict = "pass" if step.passed else f"fail: {step.reason}"
            lines.append(
                f"| {i} | {step.rate_rps:.1f} | {step.offered_rps:.1f} | {step.achieved_rps:.1f} "
                f"| {_fmt(step.p99_ms)} "
                f"| {step.requests} | {step.errors} | {verdict} |"
            )
        lines.append("")
    notes = _warnings(info, summaries)
    if search is not None and any(s.requests < MIN_STEP_REQUESTS for s in search.steps):
        notes.append(
            f"Some steps sent fewer than {MIN_STEP_REQUESTS} requests: their p99 is close to "
            "their maximum. Use a longer --step-s for a steadier verdict."
        )
    if notes:
        lines += ["## Warnings", "", *(f"- {n}" for n in notes), ""]
    lines += ["## Plots", ""]
    lines += [f"![{name}]({name})" for name in plot_files]
    lines += [
        "",
        "## How to read this",
        "",
        "- Latencies are client-side (send to last byte) over successful requests; "
        "percentiles interpolate linearly.",
        "- SLO violation = failed or slower than the function's SLO, over all requests.",
        "- Offered rps counts sends over the window; achieved counts 200s over the window or "
        "until the last reply, whichever is longer.",
        "- The breakdown stacks mean cold start, queue and exec (gateway headers) and the rest "
        "(HTTP, routing) to the mean latency.",
        "- Raw data: `records.csv` (one row per request), `instances.csv` (instance polls).",
        "",
    ]
    return "\n".join(lines)


def write_report(
    out_dir: Path,
    info: RunInfo,
    records: Sequence[RequestRecord],
    samples: Sequence[InstanceSample],
    slo_ms_by_function: Mapping[str, float | None],
    search: SearchState | None = None,
) -> dict[str, FunctionSummary]:
    """Write every file of the report into `out_dir` (created) and return the summaries."""
    out_dir.mkdir(parents=True, exist_ok=True)
    summaries = summarize(records, slo_ms_by_function, info.window_s)
    if info.closed_loop:  # no schedule to lag behind
        summaries = {n: replace(s, send_lag_ms_p99=math.nan) for n, s in summaries.items()}
    write_records_csv(out_dir / "records.csv", records)
    write_instances_csv(out_dir / "instances.csv", samples)
    plots.plot_latency_cdf(out_dir / PLOT_FILES[0], records, summaries)
    plots.plot_rates(out_dir / PLOT_FILES[1], records, samples, info.window_s)
    plots.plot_breakdown(out_dir / PLOT_FILES[2], summaries)
    plots.plot_violations(out_dir / PLOT_FILES[3], summaries)
    plots.plot_batch_sizes(out_dir / PLOT_FILES[4], summaries)
    plot_files = list(PLOT_FILES)
    summary: dict[str, Any] = {
        "run": {
            **{k: getattr(info, k) for k in info.__slots__},
            **({"send_lag": CLOSED_LOOP_LAG} if info.closed_loop else {}),
        },
        "overall": summary_to_json(summaries[OVERALL]),
        "functions": {n: summary_to_json(s) for n, s in summaries.items() if n != OVERALL},
        "instances": {
            "polls": len({s.t_s for s in samples}),
            "max_ready": max(
                (
                    sum(x.count for x in samples if x.t_s == t and x.state == "ready")
                    for t in {s.t_s for s in samples}
                ),
                default=0,
            ),
        },
    }
    if search is not None:
        slo_ms = next(iter(slo_ms_by_function.values()), None)
        plots.plot_max_rate(
            out_dir / MAX_RATE_PLOT,
            [s.offered_rps for s in search.steps],
            [s.p99_ms for s in search.steps],
            [s.achieved_rps for s in search.steps],
            [s.passed for s in search.steps],
            slo_ms,
        )
        plot_files.append(MAX_RATE_PLOT)
        summary["max_rate"] = {
            "max_sustainable_rps": search.result_rps,
            "steps": [
                {
                    "rate_rps": s.rate_rps,
                    "offered_rps": s.offered_rps,
                    "passed": s.passed,
                    "reason": s.reason,
                    "p99_ms": None if math.isnan(s.p99_ms) else s.p99_ms,
                    "achieved_rps": s.achieved_rps,
                    "requests": s.requests,
                    "errors": s.errors,
                }
                for s in search.steps
            ],
        }
    summary["plots"] = plot_files
    (out_dir / "summary.json").write_bytes(
        orjson.dumps(summary, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)
    )
    (out_dir / "report.md").write_text(
        _markdown(info, summaries, plot_files, search), encoding="utf-8"
    )
    return summaries

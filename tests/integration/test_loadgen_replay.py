"""Acceptance for the load generator: a 20-second compressed replay of a bursty trace row
against a real `infless serve` produces a complete report whose numbers match the records.

The trace row comes from the Azure sample shipped with the repository
(`examples/traces/1000_inv.csv.gz`, read compressed as users pass it).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from loadgen import cli
from loadgen.records import RequestRecord, read_records_csv
from loadgen.report import PLOT_FILES
from loadgen.traces import (
    busiest_window_start,
    choose_rows_by_pattern,
    read_trace,
)
from loadgen.workloads import ReplaySpec, pair_rows_with_functions, replay_schedule
from tests.support.gateway import start_gateway

TRACE = Path(__file__).resolve().parents[2] / "examples" / "traces" / "1000_inv.csv.gz"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SLO_MS = 200.0
MINUTES = 10
MINUTE_S = 2.0  # 10 trace minutes in 20 seconds
PEAK_RPS = 20.0
SEED = 0
MIN_INVOCATIONS = 100

pytestmark = pytest.mark.slow


def _expected_schedule_times(trace: Path) -> list[float]:
    """The schedule rebuilt from the pure workload code with the command's arguments."""
    rows = choose_rows_by_pattern(read_trace(trace), "bursty", 1, SEED, MIN_INVOCATIONS)
    spec = ReplaySpec(
        start_minute=busiest_window_start(rows, MINUTES),
        minutes=MINUTES,
        minute_s=MINUTE_S,
        seed=SEED,
        peak_rps=PEAK_RPS,
    )
    pairs = pair_rows_with_functions(rows, ["mnist"])
    return [a.at_s for a in replay_schedule(pairs, spec, 10_000, 600.0).arrivals]


def _assert_png(path: Path) -> None:
    assert path.read_bytes()[:8] == PNG_SIGNATURE, f"{path.name} is not a PNG"
    with Image.open(path) as image:
        image.verify()
    with Image.open(path) as image:
        assert image.format == "PNG"
        assert min(image.size) > 100
    import matplotlib.image

    assert matplotlib.image.imread(str(path)).ndim == 3


def _close(reported: float | None, recomputed: float) -> bool:
    if reported is None:
        return math.isnan(recomputed)
    return reported == pytest.approx(recomputed, rel=1e-6, abs=1e-5)


def test_bursty_replay_produces_a_complete_report(tmp_path: Path) -> None:
    assert TRACE.is_file(), f"{TRACE} ships with the repository"
    out = tmp_path / "report"
    function = {"name": "mnist", "image": "mnist", "slo_ms": SLO_MS, "max_batch": 8, "instances": 1}
    with start_gateway(tmp_path, functions=[function]) as gw:
        code = cli.main(
            [
                "replay",
                "--gateway",
                gw.url,
                "--trace",
                str(TRACE),
                "--pattern",
                "bursty",
                "--min-invocations",
                str(MIN_INVOCATIONS),
                "--minutes",
                str(MINUTES),
                "--minute-seconds",
                str(MINUTE_S),
                "--peak-rps",
                str(PEAK_RPS),
                "--seed",
                str(SEED),
                "--max-duration-s",
                "60",
                "--timeout-s",
                "20",
                "--out",
                str(out),
                "--no-progress",
            ]
        )
        served = gw.json("GET", "/system/function/mnist")["invocationCount"]
    assert code == 0

    for name in ("summary.json", "report.md", "records.csv", "instances.csv", *PLOT_FILES):
        assert (out / name).is_file(), f"report is missing {name}"
    summary = json.loads((out / "summary.json").read_text())
    records = read_records_csv(out / "records.csv")

    # Every scheduled request was sent once, at its scheduled offset, and recorded.
    expected_times = _expected_schedule_times(TRACE)
    assert len(records) == len(expected_times) > 0
    assert [r.index for r in records] == list(range(len(records)))
    assert [r.scheduled_s for r in records] == pytest.approx(expected_times)
    assert all(r.status != 0 or r.error for r in records)

    ok: list[RequestRecord] = [r for r in records if r.ok]
    assert ok, f"no request succeeded: {summary['overall']['errors_by_code']}"
    assert served >= len(ok)
    # The gateway's timing headers reached the records.
    assert all(r.instance.startswith("mnist") and r.batch_size >= 1 for r in ok)
    assert all(not math.isnan(r.exec_ms) and not math.isnan(r.queue_ms) for r in ok)

    # The report's numbers are the records' numbers.
    for scope in (summary["overall"], summary["functions"]["mnist"]):
        assert scope["requests"] == len(records)
        assert scope["ok"] == len(ok)
        assert scope["errors"] == len(records) - len(ok)
        latencies = [r.latency_ms for r in ok]
        for key, q in (("p50_ms", 50), ("p90_ms", 90), ("p99_ms", 99)):
            assert _close(scope["latency"][key], float(np.percentile(latencies, q)))
        assert _close(scope["latency"]["max_ms"], max(latencies))
        late_or_failed = sum(1 for r in records if not r.ok or r.latency_ms > SLO_MS)
        assert scope["slo_violations"] == late_or_failed
        assert _close(scope["slo_violation_rate"], late_or_failed / len(records))
        assert scope["cold_starts"] == sum(1 for r in ok if r.cold_start)
        batch_counts: dict[str, int] = {}
        for r in ok:
            batch_counts[str(r.batch_size)] = batch_counts.get(str(r.batch_size), 0) + 1
        assert scope["batch_sizes"] == dict(sorted(batch_counts.items()))
    assert summary["functions"]["mnist"]["slo_ms"] == SLO_MS
    assert summary["run"]["scheduled"] == len(records)
    assert summary["instances"]["polls"] > 0
    assert summary["instances"]["max_ready"] >= 1

    report_md = (out / "report.md").read_text()
    assert "| mnist | 200 |" in report_md
    assert summary["plots"] == list(PLOT_FILES)
    for name in PLOT_FILES:
        _assert_png(out / name)

"""The report directory (files, numbers, PNGs) and the command line end to end (stand-in)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from loadgen import cli, traces, workloads
from loadgen.records import InstanceSample, RequestRecord, read_records_csv
from loadgen.report import PLOT_FILES, RunInfo, write_report
from tests.support.fake_gateway import BERT, MNIST, FakeGateway, serve_in_thread

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _info(window_s: float = 2.0) -> RunInfo:
    return RunInfo(
        kind="synthetic",
        gateway="http://127.0.0.1:1",
        schedule="test",
        seed=0,
        started_at="2025-01-01T00:00:00+00:00",
        window_s=window_s,
        elapsed_s=window_s,
        scheduled=0,
        not_sent=0,
        dropped_by_cap=0,
        connection_limit=16,
        command="loadgen test",
    )


def assert_png(path: Path) -> None:
    assert path.read_bytes()[:8] == PNG_SIGNATURE, path
    with Image.open(path) as image:
        image.verify()
    with Image.open(path) as image:
        assert image.size[0] > 100
        assert image.size[1] > 100


def _comparable(record: RequestRecord) -> tuple[object, ...]:
    """The record's fields with NaN as None (NaN != NaN would fail equal records)."""
    return tuple(
        None if isinstance(v, float) and math.isnan(v) else v for v in dataclasses.astuple(record)
    )


def test_report_files_and_numbers(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    records = [
        RequestRecord(
            index=i,
            function="a" if i % 2 else "b",
            scheduled_s=i * 0.01,
            sent_s=i * 0.01,
            latency_ms=float(rng.uniform(1, 300)),
            status=200,
            error="",
            batch_size=1 + i % 4,
            queue_ms=1.0,
            exec_ms=2.0,
            cold_start=i < 2,
            cold_start_ms=50.0 if i < 2 else math.nan,
        )
        for i in range(100)
    ] + [
        RequestRecord(
            index=100,
            function="a",
            scheduled_s=1.0,
            sent_s=1.0,
            latency_ms=math.nan,
            status=0,
            error="timeout",
        )
    ]
    samples = [InstanceSample(float(t), "a", "ready", 1 + t % 2) for t in range(3)]
    summaries = write_report(tmp_path, _info(), records, samples, {"a": 100.0, "b": 250.0})
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["overall"]["requests"] == 101
    assert summary["functions"]["a"]["errors_by_code"] == {"timeout": 1}
    a_latencies = [r.latency_ms for r in records if r.function == "a" and r.ok]
    assert summary["functions"]["a"]["latency"]["p99_ms"] == pytest.approx(
        np.percentile(a_latencies, 99), abs=1e-5
    )
    late = sum(1 for r in records if r.function == "a" and (not r.ok or r.latency_ms > 100.0))
    assert summary["functions"]["a"]["slo_violations"] == late
    assert summary["instances"] == {"polls": 3, "max_ready": 2}
    assert summaries["a"].requests == 51
    assert [_comparable(r) for r in read_records_csv(tmp_path / "records.csv")] == [
        _comparable(r) for r in records
    ]
    assert "| a | 100 | 51 |" in (tmp_path / "report.md").read_text()
    assert summary["plots"] == list(PLOT_FILES)
    for name in PLOT_FILES:
        assert_png(tmp_path / name)


def test_report_of_an_empty_run_still_draws(tmp_path: Path) -> None:
    write_report(tmp_path, _info(), [], [], {"a": 10.0})
    for name in PLOT_FILES:
        assert_png(tmp_path / name)


def test_cli_choice_lists_match_the_modules() -> None:
    assert cli.PATTERN_CLASSES == traces.PATTERN_CLASSES
    assert cli.SYNTHETIC_SHAPES == workloads.SYNTHETIC_SHAPES


def test_configure_registers_every_mode() -> None:
    parser = argparse.ArgumentParser(prog="infless loadgen")
    cli.configure(parser, "loadgen")
    args = parser.parse_args(["max-rate", "--function", "f", "--seq-len", "4:6"])
    assert (args.loadgen_mode, args.function, args.seq_len) == ("max-rate", "f", (4, 6))
    with pytest.raises(SystemExit):
        parser.parse_args(["replay", "--trace", "x.csv"])  # needs --row-id or --pattern


BURSTY_COUNTS = [1] * 5 + [30, 60, 10] + [1] * 1432


def _trace(tmp_path: Path) -> Path:
    counts = BURSTY_COUNTS
    header = "HashFunction,HashApp,HashOwner," + ",".join(f"minute_{i + 1}" for i in range(1440))
    path = tmp_path / "trace.csv"
    path.write_text(header + "\n" + ",".join(["burst1"] * 3 + [str(c) for c in counts]) + "\n")
    return path


def test_classify_prints_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["classify", "--trace", str(_trace(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert "burst1" in out
    assert "bursty" in out
    assert "bursty 1" in out


def test_replay_command_end_to_end(tmp_path: Path) -> None:
    gateway = FakeGateway(functions=[MNIST, BERT], exec_ms=0.0)
    out = tmp_path / "report"
    with serve_in_thread(gateway) as url:
        code = cli.main(
            [
                "replay",
                "--gateway",
                url,
                "--trace",
                str(_trace(tmp_path)),
                "--pattern",
                "bursty",
                "--min-invocations",
                "0",
                "--minutes",
                "4",
                "--minute-seconds",
                "0.1",
                "--peak-rps",
                "200",
                "--out",
                str(out),
                "--no-progress",
                "--poll-interval-s",
                "0.1",
            ]
        )
    assert code == 0
    # the busiest 4-minute window starts at minute 4 (the first of two equal windows)
    spec = workloads.ReplaySpec(start_minute=4, minutes=4, minute_s=0.1, seed=0, peak_rps=200.0)
    expected = workloads.scaled_window_counts(BURSTY_COUNTS, spec)
    assert expected == [0, 10, 20, 4]  # 200 rps x 0.1 s = 20 at the peak
    records = read_records_csv(out / "records.csv")
    assert len(records) == 2 * sum(expected)  # one row drives both functions
    assert gateway.bad_bodies == []
    assert {r.function for r in records} == {"mnist", "bert"}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["overall"]["requests"] == len(records)
    assert summary["run"]["kind"] == "replay"
    assert "minutes 4..7" in summary["run"]["schedule"]


def test_remote_gateway_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code = cli.main(["synthetic", "--gateway", "http://192.0.2.1:8080", "--out", str(tmp_path)])
    assert code == 2
    assert "--allow-remote" in capsys.readouterr().err


def test_max_rate_command_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gateway = FakeGateway(functions=[BERT], exec_ms=0.0)
    out = tmp_path / "search"
    with serve_in_thread(gateway) as url:
        code = cli.main(
            [
                "max-rate",
                "--gateway",
                url,
                "--function",
                "bert",
                "--start-rps",
                "20",
                "--step-s",
                "0.2",
                "--max-steps",
                "2",
                "--pause-s",
                "0",
                "--slo-ms",
                "5000",
                "--out",
                str(out),
                "--no-progress",
                "--poll-interval-s",
                "0",
            ]
        )
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    steps = summary["max_rate"]["steps"]
    assert [s["rate_rps"] for s in steps] == [20.0, 40.0]
    records = read_records_csv(out / "records.csv")
    assert sum(s["requests"] for s in steps) == len(records) == gateway.received["bert"]
    assert {r.step for r in records} == {1, 2}
    assert_png(out / "max_rate.png")
    assert "max sustainable rate" in capsys.readouterr().out

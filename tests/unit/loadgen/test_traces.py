"""Trace parsing (both schemas), pattern classification and row choice."""

from __future__ import annotations

import gzip
from collections.abc import Callable
from pathlib import Path

import pytest

from loadgen.traces import (
    TraceFormatError,
    busiest_window_start,
    choose_rows_by_pattern,
    classify_counts,
    find_rows,
    parse_trace_lines,
    read_trace,
    row_features,
)

MINUTES = 1440


def _row_csv(ids: list[str], counts: list[int]) -> str:
    return ",".join([*ids, *(str(c) for c in counts)])


def _invitro(tmp_path: Path, rows: dict[str, list[int]]) -> Path:
    minutes = len(next(iter(rows.values())))
    header = ",".join(
        ["HashFunction", "HashApp", "HashOwner"] + [f"minute_{i + 1}" for i in range(minutes)]
    )
    lines = [header] + [_row_csv([fid, fid, fid], counts) for fid, counts in rows.items()]
    path = tmp_path / "inv.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _azure(tmp_path: Path, rows: dict[str, list[int]]) -> Path:
    minutes = len(next(iter(rows.values())))
    header = ",".join(
        ["HashOwner", "HashApp", "HashFunction", "Trigger"] + [str(i + 1) for i in range(minutes)]
    )
    lines = [header] + [
        _row_csv([f"owner-{fid}", f"app-{fid}", fid, "http"], counts)
        for fid, counts in rows.items()
    ]
    path = tmp_path / "invocations_per_function_md.anon.d01.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_invitro_schema_reads_ids_and_counts(tmp_path: Path) -> None:
    rows = read_trace(_invitro(tmp_path, {"aaa": [0, 3, 1], "bbb": [2, 0, 0]}))
    assert [r.function_id for r in rows] == ["aaa", "bbb"]
    assert rows[0].counts_per_minute == (0, 3, 1)
    assert rows[0].trigger == ""
    assert rows[1].total_invocations == 2


def test_azure_2019_schema_reads_columns_in_its_order(tmp_path: Path) -> None:
    rows = read_trace(_azure(tmp_path, {"fff": [5, 0, 7]}))
    (row,) = rows
    assert (row.function_id, row.app_id, row.owner_id, row.trigger) == (
        "fff",
        "app-fff",
        "owner-fff",
        "http",
    )
    assert row.counts_per_minute == (5, 0, 7)


WriteTrace = Callable[[Path, dict[str, list[int]]], Path]


@pytest.mark.parametrize("schema", [_invitro, _azure])
def test_gzip_trace_gives_the_same_rows_as_the_plain_csv(
    tmp_path: Path, schema: WriteTrace
) -> None:
    plain = schema(tmp_path, {"aaa": [0, 3, 1], "bbb": [2, 0, 0]})
    packed = plain.with_name(plain.name + ".gz")
    packed.write_bytes(gzip.compress(plain.read_bytes(), mtime=0))
    rows = read_trace(packed)
    assert rows == read_trace(plain)
    assert [r.counts_per_minute for r in rows] == [(0, 3, 1), (2, 0, 0)]


def test_a_corrupt_gzip_trace_is_a_format_error(tmp_path: Path) -> None:
    plain = _invitro(tmp_path, {"aaa": [0, 3, 1]})
    packed = tmp_path / "inv.csv.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes())[:-12])  # truncated
    with pytest.raises(TraceFormatError, match=r"inv\.csv\.gz: not a readable gzip file"):
        read_trace(packed)


def test_unknown_header_names_both_schemas() -> None:
    with pytest.raises(TraceFormatError, match="HashOwner,HashApp,HashFunction,Trigger"):
        parse_trace_lines(["a,b,c,d\n", "1,2,3,4\n"])


def test_short_row_and_negative_counts_are_rejected() -> None:
    header = "HashFunction,HashApp,HashOwner,minute_1,minute_2\n"
    with pytest.raises(TraceFormatError, match=":2: 4 fields"):
        parse_trace_lines([header, "x,x,x,1\n"])
    with pytest.raises(TraceFormatError, match="negative"):
        parse_trace_lines([header, "x,x,x,1,-1\n"])


def _day(active: dict[int, int]) -> list[int]:
    counts = [0] * MINUTES
    for minute, count in active.items():
        counts[minute] = count
    return counts


def test_classification_on_synthetic_rows() -> None:
    assert classify_counts(_day({100: 5})) == "idle"
    # 10 active minutes at irregular gaps: sporadic
    assert (
        classify_counts(_day(dict.fromkeys((3, 4, 5, 200, 203, 900, 901, 902, 1300, 1439), 1)))
        == "sporadic"
    )
    # a timer every 15 minutes: periodic
    assert classify_counts(_day(dict.fromkeys(range(0, MINUTES, 15), 2))) == "periodic"
    # steady load every minute: periodic (regular gaps, no spike)
    assert classify_counts([20 + (m % 3) for m in range(MINUTES)]) == "periodic"
    # steady low load with one huge spike: bursty
    spiky = [2] * MINUTES
    spiky[700] = 500
    assert classify_counts(spiky) == "bursty"
    # gaps alternating 1 and 5 minutes (CV 0.67), flat counts: neither regular nor spiky
    irregular = [0] * MINUTES
    for minute in range(0, MINUTES, 6):
        irregular[minute] = irregular[minute + 1] = 3
    assert classify_counts(irregular) == "other"


def test_row_features_gap_cv_of_a_timer_is_zero() -> None:
    features = row_features(_day(dict.fromkeys(range(0, MINUTES, 60), 1)))
    assert features.active_minutes == 24
    assert features.gap_cv == 0.0
    assert features.peak_count == 1


def test_find_rows_by_id_and_prefix(tmp_path: Path) -> None:
    rows = read_trace(_invitro(tmp_path, {"abc123": [1], "abd999": [2], "zzz": [3]}))
    assert [r.function_id for r in find_rows(rows, ["zzz", "abc"])] == ["zzz", "abc123"]
    with pytest.raises(TraceFormatError, match="prefix matches 2"):
        find_rows(rows, ["ab"])
    with pytest.raises(TraceFormatError, match="no trace row"):
        find_rows(rows, ["nope"])


def test_choose_rows_by_pattern_is_seeded(tmp_path: Path) -> None:
    spiky = [2] * MINUTES
    spiky[10] = 900
    rows = parse_trace_lines(
        ["HashFunction,HashApp,HashOwner," + ",".join(f"minute_{i + 1}" for i in range(MINUTES))]
        + [_row_csv([f"b{i}"] * 3, spiky) for i in range(6)]
        + [_row_csv(["p"] * 3, _day(dict.fromkeys(range(0, MINUTES, 10), 1)))]
    )
    first = choose_rows_by_pattern(rows, "bursty", 2, seed=7)
    again = choose_rows_by_pattern(rows, "bursty", 2, seed=7)
    assert first == again
    assert all(r.function_id.startswith("b") for r in first)
    with pytest.raises(TraceFormatError, match="3 wanted"):
        choose_rows_by_pattern(rows, "periodic", 3, seed=0)
    with pytest.raises(TraceFormatError, match="0 rows qualify"):
        choose_rows_by_pattern(rows, "periodic", 1, seed=0, min_invocations=1000)


def test_busiest_window_finds_the_spike() -> None:
    header = "HashFunction,HashApp,HashOwner," + ",".join(f"minute_{i + 1}" for i in range(10))
    rows = parse_trace_lines([header, "a,a,a,1,1,1,1,1,1,9,9,1,1"])
    assert busiest_window_start(rows, 2) == 6
    assert busiest_window_start(rows, 100) == 0  # window longer than the day

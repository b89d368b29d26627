"""The one trace parser: both schemas into a count matrix, shared by loadgen and the
cold-start evaluation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from infless.offline.coldstart.trace import load_trace
from loadgen.tracefile import TraceFormatError, parse_table_text, read_table
from loadgen.traces import read_trace

SAMPLE = Path(__file__).resolve().parents[3] / "examples" / "traces" / "1000_inv.csv.gz"


def test_table_keeps_ids_counts_and_column_names() -> None:
    table = parse_table_text(
        "HashOwner,HashApp,HashFunction,Trigger,1,2,3\no1,a1,f1,http,1,0,2\no2,a2,f2,timer,0,0,4\n"
    )
    assert table.schema == "azure2019"
    assert (table.function_ids, table.app_ids, table.owner_ids) == (
        ("f1", "f2"),
        ("a1", "a2"),
        ("o1", "o2"),
    )
    assert table.triggers == ("http", "timer")
    assert table.minute_columns == ("1", "2", "3")
    np.testing.assert_array_equal(table.counts, [[1, 0, 2], [0, 0, 4]])
    assert table.counts.dtype == np.int64


def test_empty_fields_count_zero_and_decimals_keep_their_integer_part() -> None:
    table = parse_table_text("HashFunction,HashApp,HashOwner,minute_1,minute_2\nf,a,o,,2.0\n")
    np.testing.assert_array_equal(table.counts, [[0, 2]])


def test_a_bad_count_names_its_line_and_column() -> None:
    text = "HashFunction,HashApp,HashOwner,minute_1,minute_2\nf,a,o,1,2\ng,a,o,1,lots\n"
    with pytest.raises(TraceFormatError, match=r"<trace>:3: bad count 'lots' in column minute_2"):
        parse_table_text(text)


def test_a_header_only_file_is_an_empty_table() -> None:
    table = parse_table_text("HashFunction,HashApp,HashOwner,minute_1\n")
    assert table.counts.shape == (0, 1)


def test_loadgen_and_the_cold_start_evaluation_read_the_same_counts() -> None:
    rows = read_trace(SAMPLE)
    trace = load_trace(SAMPLE)
    table = read_table(SAMPLE)
    assert trace.counts.shape == (1000, 1440)
    np.testing.assert_array_equal(trace.counts, [row.counts_per_minute for row in rows])
    assert trace.function_ids == tuple(row.function_id for row in rows) == table.function_ids

"""Parsing both invocation schemas and the memory file."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from infless.offline.coldstart.trace import (
    DEFAULT_MEMORY_MB,
    classify_patterns,
    load_memory,
    load_trace,
    memory_per_function,
    parse_trace,
)

SAMPLE = (
    "HashFunction,HashApp,HashOwner,minute_1,minute_2,minute_3\nf1,a1,o1,0,3,1\nf2,a2,o2,5,0,0\n"
)
AZURE = (
    "HashOwner,HashApp,HashFunction,Trigger,1,2,3,4\n"
    "o1,a1,f1,http,1,0,0,2\n"
    "o1,a1,f2,timer,0,0,1,0\n"
    "o2,a9,f3,queue,4,4,4,4\n"
)
MEMORY = (
    "HashApp,HashOwner,SampleCount,AverageAllocatedMb,AverageAllocatedMb_pct1\n"
    "a1,o1,10,100,90\n"
    "a2,o2,10,300,250\n"
)


def test_sample_schema(tmp_path: Path) -> None:
    path = tmp_path / "inv.csv"
    path.write_text(SAMPLE)
    trace = load_trace(path)
    assert trace.schema == "sample"
    assert trace.function_ids == ("f1", "f2")
    assert trace.app_keys == (("o1", "a1"), ("o2", "a2"))
    assert trace.triggers is None
    np.testing.assert_array_equal(trace.counts, [[0, 3, 1], [5, 0, 0]])
    assert (trace.n_functions, trace.n_minutes) == (2, 3)


def test_original_2019_schema_with_trigger(tmp_path: Path) -> None:
    path = tmp_path / "invocations_per_function_md.anon.d01.csv"
    path.write_text(AZURE)
    trace = load_trace(path)
    assert trace.schema == "azure2019"
    assert trace.triggers == ("http", "timer", "queue")
    assert trace.app_keys[0] == trace.app_keys[1] == ("o1", "a1")
    assert len(set(trace.function_ids)) == 3
    assert trace.counts.shape == (3, 4)
    assert int(trace.counts.sum()) == 20


def test_memory_per_app_with_a_median_default_for_missing_apps(tmp_path: Path) -> None:
    inv, mem = tmp_path / "inv.csv", tmp_path / "mem.csv"
    inv.write_text(AZURE)
    mem.write_text(MEMORY)
    memory_mb, defaulted = memory_per_function(load_trace(inv), load_memory(mem))
    np.testing.assert_array_equal(memory_mb, [100.0, 100.0, 200.0])  # a9 missing: median
    assert defaulted == 1


def test_memory_defaults_without_a_memory_file() -> None:
    memory_mb, defaulted = memory_per_function(parse_trace(SAMPLE), None)
    np.testing.assert_array_equal(memory_mb, [DEFAULT_MEMORY_MB] * 2)
    assert defaulted == 2


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty file"),
        ("a,b,c,1,2\nx,y,z,1,2\n", "header starts"),
        (
            "HashFunction,HashApp,HashOwner,minute_1,minute_2\nf,a,o,1\n",
            r":2: 4 fields, the header has 5",
        ),
        ("HashFunction,HashApp,HashOwner,minute_1\nf,a,o,x\n", "non-negative integers"),
        ("HashFunction,HashApp,HashOwner,minute_1,minute_2\nf,a,o,1,-2\n", "minute_2 is -2"),
    ],
)
def test_bad_trace_files_say_where_and_what(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_trace(text, source="t.csv")


@pytest.mark.parametrize("text", [SAMPLE, AZURE, SAMPLE.replace("\n", "\r\n")])
def test_gzip_trace_reads_like_the_plain_csv(tmp_path: Path, text: str) -> None:
    plain, packed = tmp_path / "inv.csv", tmp_path / "inv.csv.gz"
    plain.write_bytes(text.encode())
    packed.write_bytes(gzip.compress(text.encode(), mtime=0))
    expected, got = load_trace(plain), load_trace(packed)
    assert (got.function_ids, got.app_keys, got.triggers, got.schema) == (
        expected.function_ids,
        expected.app_keys,
        expected.triggers,
        expected.schema,
    )
    np.testing.assert_array_equal(got.counts, expected.counts)


def test_gzip_memory_reads_like_the_plain_csv(tmp_path: Path) -> None:
    plain, packed = tmp_path / "mem.csv", tmp_path / "mem.csv.gz"
    plain.write_text(MEMORY)
    packed.write_bytes(gzip.compress(MEMORY.encode(), mtime=0))
    assert load_memory(packed) == load_memory(plain) == {("o1", "a1"): 100.0, ("o2", "a2"): 300.0}


def test_a_corrupt_gzip_file_is_a_value_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "inv.csv.gz"
    path.write_bytes(gzip.compress(SAMPLE.encode())[:-12])  # truncated
    with pytest.raises(ValueError, match=r"inv\.csv\.gz: not a readable gzip file"):
        load_trace(path)
    path.write_text(SAMPLE)  # plain text under a .gz name
    with pytest.raises(ValueError, match="not a readable gzip file"):
        load_trace(path)


def test_memory_file_needs_its_columns(tmp_path: Path) -> None:
    path = tmp_path / "mem.csv"
    path.write_text("HashApp,SampleCount\na,1\n")
    with pytest.raises(ValueError, match="AverageAllocatedMb, HashOwner"):
        load_memory(path)


def test_pattern_classes() -> None:
    minutes = 1440
    periodic = np.zeros(minutes, dtype=np.int64)
    periodic[::30] = 2
    sporadic = np.zeros(minutes, dtype=np.int64)
    sporadic[[3, 5, 7, 1400]] = 1  # gaps 2, 2, 1393: CV 1.4
    bursty = np.zeros(minutes, dtype=np.int64)
    bursty[np.cumsum(np.random.default_rng(0).geometric(0.3, size=300))] = 1
    bursty[100] = 500
    few = np.zeros(minutes, dtype=np.int64)
    few[10] = 7
    labels = classify_patterns(np.stack([periodic, sporadic, bursty, few]))
    assert labels.tolist() == ["periodic", "sporadic", "bursty", "few"]

"""Request bodies from signatures; gateway JSON parsing; the loopback-only target check."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from loadgen.bodies import SignatureError, make_bodies, sample_payload
from loadgen.functions import (
    FunctionInfo,
    InputSpec,
    TargetError,
    check_target,
    parse_duration_ms,
    parse_function_status,
)


def _fn(*inputs: InputSpec) -> FunctionInfo:
    return FunctionInfo(name="f", slo_ms=100.0, max_batch=4, inputs=inputs)


def test_single_input_is_sent_bare_with_its_shape() -> None:
    (body,) = make_bodies(_fn(InputSpec("image", "float32", (1, 28, 28))), 1, seed=0)
    inputs = orjson.loads(body)["inputs"]
    assert np.asarray(inputs).shape == (1, 28, 28)
    assert np.asarray(inputs).dtype == np.float64


def test_several_inputs_share_one_sequence_length() -> None:
    fn = _fn(
        InputSpec("input_ids", "int64", (-1,)),
        InputSpec("attention_mask", "int64", (-1,)),
        InputSpec("token_type_ids", "int64", (-1,)),
    )
    for body in make_bodies(fn, 8, seed=1, seq_len_range=(3, 9)):
        inputs = orjson.loads(body)["inputs"]
        lengths = {len(v) for v in inputs.values()}
        assert len(lengths) == 1
        assert 3 <= lengths.pop() <= 9
        assert set(inputs["attention_mask"]) == {1}
        assert set(inputs["token_type_ids"]) == {0}
        assert all(0 <= t < 1000 for t in inputs["input_ids"])


def test_hints_bound_integer_values() -> None:
    rng = np.random.default_rng(0)
    vocab = InputSpec("ids", "int64", (200,), low=0, high=5)
    assert set(sample_payload([vocab], rng, (1, 1))["inputs"]) <= set(range(5))
    parsed = parse_function_status(
        {
            "name": "x",
            "signature": {
                "inputs": [{"name": "ids", "dtype": "int32", "shape": [-1], "range": [10, 12]}]
            },
        }
    )
    assert (parsed.inputs[0].low, parsed.inputs[0].high) == (10, 13)
    values = sample_payload(parsed.inputs, rng, (300, 300))["inputs"]
    assert set(values) == {10, 11, 12}


def test_small_dtypes_and_bool_and_scalars() -> None:
    rng = np.random.default_rng(0)
    payload = sample_payload(
        [
            InputSpec("a", "int8", (50,)),
            InputSpec("b", "bool", (4,)),
            InputSpec("c", "float32", ()),
        ],
        rng,
        (1, 1),
    )["inputs"]
    assert all(0 <= v < 128 for v in payload["a"])
    assert all(isinstance(v, bool) for v in payload["b"])
    assert isinstance(payload["c"], float)


def test_bodies_are_seeded_per_function() -> None:
    fn = _fn(InputSpec("x", "float32", (4,)))
    assert make_bodies(fn, 3, seed=5) == make_bodies(fn, 3, seed=5)
    assert make_bodies(fn, 3, seed=5) != make_bodies(fn, 3, seed=6)
    assert len(set(make_bodies(fn, 3, seed=5))) == 3


def test_unusable_signatures_are_explained() -> None:
    with pytest.raises(SignatureError, match="no inputs"):
        make_bodies(_fn(), 1, seed=0)
    with pytest.raises(SignatureError, match="complex64"):
        make_bodies(_fn(InputSpec("z", "complex64", (2,))), 1, seed=0)


def test_function_status_slo_from_field_or_annotation() -> None:
    full = parse_function_status(
        {
            "name": "mnist",
            "latencyTargetMs": 200.0,
            "maxBatch": 8,
            "annotations": {"com.infless.latency_target": "999ms"},
            "signature": {"inputs": [{"name": "image", "dtype": "float32", "shape": [1, 28, 28]}]},
        }
    )
    assert (full.slo_ms, full.max_batch) == (200.0, 8)
    assert full.inputs == (InputSpec("image", "float32", (1, 28, 28)),)
    openfaas = parse_function_status(
        {"name": "other", "annotations": {"com.infless.latency_target": "0.05s"}}
    )
    assert openfaas.slo_ms == 50.0
    assert openfaas.inputs == ()
    assert parse_function_status({"name": "plain"}).slo_ms is None


def test_parse_duration() -> None:
    assert parse_duration_ms("50ms") == 50.0
    assert parse_duration_ms("2s") == 2000.0
    assert parse_duration_ms("75") == 75.0
    assert parse_duration_ms("soon") is None


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:8080", "http://localhost:1/", "http://[::1]:8080", "http://127.8.0.2"],
)
def test_loopback_targets_are_allowed(url: str) -> None:
    assert check_target(url, allow_remote=False) == url.rstrip("/")


@pytest.mark.parametrize(
    "url",
    [
        "http://10.0.0.5:8080",
        "http://example.com",
        "http://0.0.0.0:8080",
        "http://127.0.0.1.nip.io",
    ],
)
def test_remote_targets_need_the_flag(url: str) -> None:
    with pytest.raises(TargetError, match="--allow-remote"):
        check_target(url, allow_remote=False)
    assert check_target(url, allow_remote=True) == url


def test_malformed_targets() -> None:
    with pytest.raises(TargetError, match="scheme"):
        check_target("ftp://127.0.0.1", allow_remote=False)
    with pytest.raises(TargetError, match="query"):
        check_target("http://127.0.0.1/?x=1", allow_remote=False)

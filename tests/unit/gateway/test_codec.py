"""Invoke bodies: valid samples become typed arrays; every mismatch names the signature."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from infless.errors import InputMismatch, MalformedBody
from infless.gateway.codec import decode_inputs, encode_outputs
from infless.types import TensorSpec

IMAGE = (TensorSpec("image", "float32", (2, 3)),)
TOKENS = (TensorSpec("query", "int64", (4,)), TensorSpec("doc", "int64", (-1,)))


def _body(inputs: object) -> bytes:
    return orjson.dumps({"inputs": inputs})


def test_single_input_as_bare_array() -> None:
    arrays = decode_inputs(_body([[1, 2, 3], [4.5, 5, 6]]), IMAGE)
    assert arrays["image"].dtype == np.float32
    assert arrays["image"].shape == (2, 3)
    assert arrays["image"][1, 0] == pytest.approx(4.5)


def test_multiple_inputs_by_name_with_variable_length() -> None:
    arrays = decode_inputs(_body({"query": [1, 2, 3, 4], "doc": [7, 8]}), TOKENS)
    assert arrays["query"].dtype == np.int64
    assert arrays["doc"].tolist() == [7, 8]


@pytest.mark.parametrize(
    ("body", "error", "fragment"),
    [
        (b"{not json", MalformedBody, "not valid JSON"),
        (b"[1, 2]", MalformedBody, '"inputs"'),
        (_body([1, 2, 3]), InputMismatch, "expected image: float32[2, 3]"),
        (_body([[1, 2, 3], [4, 5]]), InputMismatch, "rectangular"),
        (_body([["a", "b", "c"], ["d", "e", "f"]]), InputMismatch, "strings"),
        (_body([[True, False, True], [True, True, True]]), InputMismatch, "float32"),
    ],
)
def test_bad_single_input_bodies(body: bytes, error: type[Exception], fragment: str) -> None:
    with pytest.raises(error, match=None) as info:
        decode_inputs(body, IMAGE)
    assert fragment in str(info.value)


def test_floats_are_refused_for_integer_inputs() -> None:
    with pytest.raises(InputMismatch, match="int64"):
        decode_inputs(_body({"query": [1.5, 2, 3, 4], "doc": [1]}), TOKENS)


def test_missing_and_unknown_input_names_are_reported() -> None:
    with pytest.raises(InputMismatch) as info:
        decode_inputs(_body({"query": [1, 2, 3, 4], "dok": [1]}), TOKENS)
    assert "missing 'doc'" in str(info.value)
    assert "unknown 'dok'" in str(info.value)


def test_multi_input_function_refuses_a_bare_array() -> None:
    with pytest.raises(InputMismatch, match="takes 2 inputs"):
        decode_inputs(_body([1, 2, 3, 4]), TOKENS)


def test_out_of_range_integers_are_refused() -> None:
    spec = (TensorSpec("x", "int8", (2,)),)
    with pytest.raises(InputMismatch, match="range"):
        decode_inputs(_body([1, 300]), spec)


def test_outputs_single_is_bare_and_multiple_are_keyed() -> None:
    one = orjson.loads(encode_outputs({"p": np.array([0.5, 0.25], dtype=np.float32)}))
    assert one == {"outputs": [0.5, 0.25]}
    two = orjson.loads(
        encode_outputs({"boxes": np.zeros((1, 2), dtype=np.float32), "labels": np.array([3])})
    )
    assert two == {"outputs": {"boxes": [[0.0, 0.0]], "labels": [3]}}

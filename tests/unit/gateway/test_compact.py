"""Compact bodies: msgpack tensor objects and raw little-endian bytes, both ways, with the
same precise errors as JSON."""

from __future__ import annotations

import msgspec
import numpy as np
import pytest

from infless.errors import InputMismatch, MalformedBody
from infless.gateway import compact
from infless.gateway.invoke import body_format, decode_sample, outputs_answer
from infless.types import TensorSpec

IMAGE = (TensorSpec("image", "float32", (3, 4, 4)),)
PAIR = (TensorSpec("query_ids", "int64", (5,)), TensorSpec("doc_ids", "int64", (-1,)))


def _tensor(array: np.ndarray) -> dict[str, object]:
    return {"dtype": array.dtype.name, "shape": list(array.shape), "data": array.tobytes()}


def test_the_content_type_picks_the_format() -> None:
    assert body_format(None) == "application/json"
    assert body_format("application/x-www-form-urlencoded") == "application/json"  # curl -d
    assert body_format("application/msgpack") == compact.MSGPACK
    assert body_format("application/x-msgpack; charset=binary") == compact.MSGPACK
    assert body_format("Application/Octet-Stream") == compact.RAW


def test_raw_bytes_become_the_input_without_a_copy() -> None:
    image = np.arange(48, dtype=np.float32).reshape(3, 4, 4)
    body = image.tobytes()
    inputs = decode_sample(body, compact.RAW, {}, IMAGE)
    np.testing.assert_array_equal(inputs["image"], image)
    assert not inputs["image"].flags.owndata  # a view of the body
    headers = {compact.DTYPE_HEADER: "float32", compact.SHAPE_HEADER: "3,4,4"}
    np.testing.assert_array_equal(decode_sample(body, compact.RAW, headers, IMAGE)["image"], image)


@pytest.mark.parametrize(
    ("body", "headers", "message"),
    [
        (b"\0" * 10, {}, "10 bytes do not hold float32"),
        (b"\0" * 192, {compact.DTYPE_HEADER: "int32"}, "must be float32, got int32"),
        (b"\0" * 192, {compact.SHAPE_HEADER: "4,4,3"}, r"shape \[4, 4, 3\], expected image"),
        (b"\0" * 192, {compact.SHAPE_HEADER: "3,x"}, "not a comma-separated list"),
    ],
)
def test_raw_mismatches_are_precise_errors(
    body: bytes, headers: dict[str, str], message: str
) -> None:
    with pytest.raises((InputMismatch, MalformedBody), match=message):
        decode_sample(body, compact.RAW, headers, IMAGE)


def test_raw_needs_one_input_and_a_shape_for_variable_dimensions() -> None:
    with pytest.raises(InputMismatch, match="carry one input; this function takes 2"):
        decode_sample(b"", compact.RAW, {}, PAIR)
    tokens = (TensorSpec("ids", "int64", (-1,)),)
    with pytest.raises(InputMismatch, match="variable dimension"):
        decode_sample(b"\0" * 16, compact.RAW, {}, tokens)
    ids = decode_sample(b"\1" + b"\0" * 15, compact.RAW, {compact.SHAPE_HEADER: "2"}, tokens)
    assert ids["ids"].tolist() == [1, 0]


def test_msgpack_tensor_objects_and_nested_lists() -> None:
    image = np.ones((3, 4, 4), dtype=np.float32)
    body = msgspec.msgpack.encode({"inputs": _tensor(image)})
    np.testing.assert_array_equal(decode_sample(body, compact.MSGPACK, {}, IMAGE)["image"], image)
    query, doc = np.arange(5), np.arange(7)
    pair = msgspec.msgpack.encode(
        {"inputs": {"query_ids": _tensor(query), "doc_ids": doc.tolist()}}
    )
    inputs = decode_sample(pair, compact.MSGPACK, {}, PAIR)
    assert inputs["query_ids"].tolist() == query.tolist()
    assert inputs["doc_ids"].tolist() == doc.tolist()


def test_msgpack_errors_name_what_is_wrong() -> None:
    with pytest.raises(MalformedBody, match="not valid msgpack"):
        decode_sample(b"\xc1", compact.MSGPACK, {}, IMAGE)
    with pytest.raises(MalformedBody, match="inputs"):
        decode_sample(msgspec.msgpack.encode([1, 2]), compact.MSGPACK, {}, IMAGE)
    missing = msgspec.msgpack.encode({"inputs": {"query_ids": [1, 2, 3, 4, 5]}})
    with pytest.raises(InputMismatch, match="missing 'doc_ids'"):
        decode_sample(missing, compact.MSGPACK, {}, PAIR)
    bad = msgspec.msgpack.encode({"inputs": {"dtype": "float32", "shape": "3", "data": b""}})
    with pytest.raises(MalformedBody, match="a tensor object is"):
        decode_sample(bad, compact.MSGPACK, {}, IMAGE)


def test_answers_come_back_in_the_request_format() -> None:
    probabilities = np.array([0.25, 0.75], dtype=np.float32)
    raw = outputs_answer({"probabilities": probabilities}, compact.RAW)
    assert raw.content_type == compact.RAW
    assert raw.headers[compact.SHAPE_HEADER] == "2"
    assert isinstance(raw.body, bytes)
    assert np.frombuffer(raw.body, dtype="<f4").tolist() == [0.25, 0.75]
    packed = outputs_answer({"a": probabilities, "b": probabilities[:1]}, compact.RAW)
    assert packed.content_type == compact.MSGPACK  # several outputs: msgpack
    assert isinstance(packed.body, bytes)
    document = msgspec.msgpack.decode(packed.body)
    assert document["outputs"]["b"]["shape"] == [1]
    assert np.frombuffer(document["outputs"]["a"]["data"], dtype="<f4").tolist() == [0.25, 0.75]

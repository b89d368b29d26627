"""V2 bodies: JSON and binary tensors in, typed batches out; every malformed body is a 400."""

from __future__ import annotations

import re

import numpy as np
import orjson
import pytest

from infless.errors import BadRequest
from infless.gateway.v2.byte_inputs import encode_binary
from infless.gateway.v2.codec import (
    bind_bodies,
    bind_inputs,
    encode_infer_response,
    parse_infer_request,
    select_outputs,
)
from infless.gateway.v2.datatypes import numpy_dtype, v2_datatype
from infless.types import SUPPORTED_DTYPES, TensorSpec

IMAGE = (TensorSpec("image", "float32", (1, 2, 2)),)
PAIR = (TensorSpec("query", "int64", (3,)), TensorSpec("doc", "int64", (-1,)))


def _binary(inputs: list[tuple[str, str, np.ndarray]], **extra: object) -> tuple[bytes, str]:
    header = orjson.dumps(
        {
            "inputs": [
                {
                    "name": name,
                    "datatype": datatype,
                    "shape": list(array.shape),
                    "parameters": {"binary_data_size": array.nbytes},
                }
                for name, datatype, array in inputs
            ],
            **extra,
        }
    )
    blobs = b"".join(np.ascontiguousarray(array).tobytes() for _, _, array in inputs)
    return header + blobs, str(len(header))


def test_every_signature_dtype_has_a_datatype_and_back() -> None:
    for name in SUPPORTED_DTYPES:
        datatype = v2_datatype(name)
        assert numpy_dtype(datatype, "x") == np.dtype(name)


def test_binary_batch_parses_and_binds_to_the_signature() -> None:
    batch = np.arange(12, dtype=np.float32).reshape(3, 1, 2, 2)
    body, length = _binary(
        [("image", "FP32", batch)], id="a", parameters={"binary_data_output": True}
    )
    request = parse_infer_request(body, length)
    assert request.id == "a"
    assert request.binary_output
    rows, arrays = bind_inputs(request.inputs, IMAGE)
    assert rows == 3
    np.testing.assert_array_equal(arrays["image"], batch)


def test_json_data_nested_or_flat_and_two_inputs() -> None:
    document = {
        "inputs": [
            {"name": "doc", "datatype": "INT64", "shape": [2, 2], "data": [1, 2, 3, 4]},
            {"name": "query", "datatype": "INT64", "shape": [2, 3], "data": [[1, 2, 3], [4, 5, 6]]},
        ]
    }
    request = parse_infer_request(orjson.dumps(document), None)
    rows, arrays = bind_inputs(request.inputs, PAIR)
    assert rows == 2
    assert arrays["doc"].tolist() == [[1, 2], [3, 4]]
    assert arrays["query"].dtype == np.int64
    assert request.outputs is None
    assert not request.binary_output


def test_bool_binary_is_one_byte_per_value() -> None:
    flags = np.array([[True, False, True]])
    body, length = _binary([("mask", "BOOL", flags)])
    request = parse_infer_request(body, length)
    assert request.inputs[0].array.tolist() == [[True, False, True]]


@pytest.mark.parametrize(
    ("document", "words"),
    [
        ([], "must be a JSON object"),
        ({"inputs": []}, "non-empty list"),
        ({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1]}]}, "needs data"),
        ({"inputs": [{"name": "x", "datatype": "FP99", "shape": [1], "data": [1]}]}, "unknown"),
        (
            {"inputs": [{"name": "x", "datatype": "BYTES", "shape": [2], "data": ["a", 1]}]},
            "strings",
        ),
        ({"inputs": [{"name": "x", "datatype": "BYTES", "shape": [2], "data": ["a"]}]}, "needs 2"),
        ({"inputs": [{"name": "x", "datatype": "BF16", "shape": [1], "data": [1]}]}, "BF16"),
        ({"inputs": [{"name": "x", "datatype": "FP32", "shape": [-1], "data": [1]}]}, "shape"),
        ({"inputs": [{"name": "x", "datatype": "FP32", "shape": [True], "data": [1]}]}, "shape"),
        ({"inputs": [{"name": "x", "datatype": "FP32", "shape": [2], "data": [1]}]}, "holds 1"),
        ({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": ["a"]}]}, "strings"),
        ({"inputs": [{"name": "x", "datatype": "INT8", "shape": [1], "data": [300]}]}, "range"),
        ({"inputs": [{"name": "x", "datatype": "INT8", "shape": [1], "data": [1.5]}]}, "INT8"),
        (
            {"inputs": [{"name": "x", "datatype": "FP32", "shape": [2], "data": [[1], [2, 3]]}]},
            "rect",
        ),
        ({"inputs": [{"datatype": "FP32", "shape": [1], "data": [1]}]}, "name"),
        ({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [1]}], "id": 5}, "id"),
        (
            {
                "inputs": [
                    {
                        "name": "x",
                        "datatype": "FP32",
                        "shape": [1],
                        "data": [1],
                        "parameters": {"shared_memory_region": "r"},
                    }
                ]
            },
            "shared memory",
        ),
        (
            {
                "inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [1]}],
                "outputs": [{"name": "y", "parameters": {"classification": 3}}],
            },
            "classification",
        ),
    ],
)
def test_malformed_requests_are_400_naming_the_problem(document: object, words: str) -> None:
    with pytest.raises(BadRequest) as failure:
        parse_infer_request(orjson.dumps(document), None)
    assert words in failure.value.message


def test_binary_framing_errors() -> None:
    batch = np.zeros((1, 1, 2, 2), dtype=np.float32)
    body, length = _binary([("image", "FP32", batch)])
    for header_length, words in [("x", "integer"), ("0", "raw binary"), ("99999", "between")]:
        with pytest.raises(BadRequest, match=words):
            parse_infer_request(body, header_length)
    with pytest.raises(BadRequest, match="beyond"):
        parse_infer_request(body + b"\0", length)
    with pytest.raises(BadRequest, match="ends before"):
        parse_infer_request(body[:-1], length)
    wrong_size = body.replace(b'"binary_data_size":16', b'"binary_data_size":12')
    with pytest.raises(BadRequest, match="take 16"):
        parse_infer_request(wrong_size, length)


def test_binding_rejects_what_the_signature_does_not_take() -> None:
    def bind(document: dict[str, object], specs: tuple[TensorSpec, ...] = IMAGE) -> None:
        request = parse_infer_request(orjson.dumps(document), None)
        bind_inputs(request.inputs, specs)

    image = {"name": "image", "datatype": "FP32", "shape": [1, 1, 2, 2], "data": [0, 1, 2, 3]}
    with pytest.raises(BadRequest, match=r"expected FP32"):
        bind({"inputs": [{**image, "datatype": "FP64"}]})
    with pytest.raises(BadRequest, match=r"shape \[1, 2, 2\]"):
        bind({"inputs": [{**image, "shape": [1, 2, 2]}]})
    with pytest.raises(BadRequest, match="missing"):
        bind({"inputs": [{**image, "name": "other"}]})
    with pytest.raises(BadRequest, match="twice"):
        bind({"inputs": [image, image]})
    with pytest.raises(BadRequest, match="batch size"):
        bind(
            {
                "inputs": [
                    {"name": "query", "datatype": "INT64", "shape": [1, 3], "data": [1, 2, 3]},
                    {"name": "doc", "datatype": "INT64", "shape": [2, 1], "data": [1, 2]},
                ]
            },
            PAIR,
        )
    with pytest.raises(BadRequest, match="any size >= 1"):
        bind({"inputs": [{**image, "shape": [0, 1, 2, 2], "data": []}]})


def test_output_selection_and_binary_flags() -> None:
    document = {
        "inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [1]}],
        "outputs": [{"name": "b", "parameters": {"binary_data": True}}, {"name": "a"}],
    }
    request = parse_infer_request(orjson.dumps(document), None)
    assert select_outputs(request, ["a", "b"]) == [("b", True), ("a", False)]
    with pytest.raises(BadRequest, match="unknown"):
        select_outputs(request, ["a"])


def test_response_json_and_binary_round_trip() -> None:
    probabilities = np.array([[0.25, 0.75], [0.5, 0.5]], dtype=np.float32)
    flags = np.array([[True], [False]])
    body, length = encode_infer_response(
        "m",
        "1",
        "id-9",
        [("p", probabilities, True), ("f", flags, True), ("j", probabilities, False)],
    )
    assert length is not None
    header = orjson.loads(body[:length])
    assert header["model_name"] == "m"
    assert header["id"] == "id-9"
    p, f, j = header["outputs"]
    assert p == {
        "name": "p",
        "datatype": "FP32",
        "shape": [2, 2],
        "parameters": {"binary_data_size": 16},
    }
    assert f["parameters"]["binary_data_size"] == 2
    assert j["data"] == [0.25, 0.75, 0.5, 0.5]
    blob = body[length:]
    np.testing.assert_array_equal(
        np.frombuffer(blob[:16], dtype="<f4").reshape(2, 2), probabilities
    )
    assert blob[16:] == b"\x01\x00"

    plain, no_length = encode_infer_response("m", "1", None, [("j", probabilities, False)])
    assert no_length is None
    assert "id" not in orjson.loads(plain)


def test_bytes_rows_become_request_bodies_json_or_binary() -> None:
    document = {
        "inputs": [{"name": "body", "datatype": "BYTES", "shape": [2, 1], "data": [["hé"], ["b"]]}]
    }
    rows = bind_bodies(parse_infer_request(orjson.dumps(document), None).inputs)
    assert [(r.body, r.content_type, r.postprocess) for r in rows] == [
        ("hé".encode(), "text/plain; charset=utf-8", False),
        (b"b", "text/plain; charset=utf-8", False),
    ]
    elements = [b"\x00\xff", b"", b"png"]
    blob = encode_binary(elements)
    header = orjson.dumps(
        {
            "inputs": [
                {
                    "name": "body",
                    "datatype": "BYTES",
                    "shape": [3],
                    "parameters": {"binary_data_size": len(blob), "content_type": "image/png"},
                }
            ]
        }
    )
    rows = bind_bodies(parse_infer_request(header + blob, str(len(header))).inputs)
    assert [r.body for r in rows] == elements
    assert {r.content_type for r in rows} == {"image/png"}


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ({"name": "text", "datatype": "BYTES", "shape": [1], "data": ["a"]}, "one input 'body'"),
        ({"name": "body", "datatype": "FP32", "shape": [1], "data": [1.0]}, "expected BYTES"),
        ({"name": "body", "datatype": "BYTES", "shape": [1, 2], "data": ["a", "b"]}, "[-1, 1]"),
    ],
)
def test_bytes_binding_names_the_expected_input(entry: dict[str, object], words: str) -> None:
    request = parse_infer_request(orjson.dumps({"inputs": [entry]}), None)
    with pytest.raises(BadRequest, match=re.escape(words)):
        bind_bodies(request.inputs)


def test_binary_bytes_framing_errors_are_400() -> None:
    good = encode_binary([b"abc"])
    for blob, words in ((good[:-1], "runs past"), (good[:2], "inside an element's length")):
        header = orjson.dumps(
            {
                "inputs": [
                    {
                        "name": "body",
                        "datatype": "BYTES",
                        "shape": [1],
                        "parameters": {"binary_data_size": len(blob)},
                    }
                ]
            }
        )
        with pytest.raises(BadRequest, match=words):
            parse_infer_request(header + blob, str(len(header)))


def test_a_tensor_function_refuses_bytes() -> None:
    document = {"inputs": [{"name": "image", "datatype": "BYTES", "shape": [1], "data": ["a"]}]}
    request = parse_infer_request(orjson.dumps(document), None)
    with pytest.raises(BadRequest, match="datatype BYTES, expected FP32"):
        bind_inputs(request.inputs, IMAGE)

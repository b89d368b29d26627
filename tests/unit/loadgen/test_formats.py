"""Request formats: every (route, format) body decodes back to the tensors the signature asks
for, carrying the same seeded sample; impossible pairs are refused naming the flag."""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np
import orjson
import pytest

from loadgen import cliargs, formats
from loadgen.bodies import make_bodies, make_samples
from loadgen.formats import (
    JSON,
    MSGPACK,
    OCTET_STREAM,
    V2_HEADER_LENGTH,
    FormatError,
    prepare_requests,
)
from loadgen.functions import FunctionInfo, InputSpec, parse_function_status

IMAGE = FunctionInfo("img", 50.0, 8, (InputSpec("x", "float32", (3, 4, 4)),), ("probs",))
TEXT = FunctionInfo(
    "bert",
    50.0,
    8,
    (
        InputSpec("input_ids", "int64", (-1,), 0, 30522),
        InputSpec("attention_mask", "int32", (-1,)),
        InputSpec("flags", "bool", (2,)),
        InputSpec("scale", "float16", ()),
    ),
    ("logits", "hidden"),
)
SEQ = (3, 9)


def _samples(function: FunctionInfo, count: int = 4) -> tuple[dict[str, Any], ...]:
    return make_samples(function, count, seed=7, seq_len_range=SEQ)


def _tensor(obj: dict[str, Any]) -> np.ndarray[Any, Any]:
    dtype = np.dtype(obj["dtype"]).newbyteorder("<")
    return np.frombuffer(obj["data"], dtype=dtype).reshape(obj["shape"])


def _assert_signature_tensor(array: np.ndarray[Any, Any], spec: InputSpec, expected: Any) -> None:
    assert array.dtype == np.dtype(spec.dtype)
    assert len(array.shape) == len(spec.shape)
    assert all(d < 0 or d == a for a, d in zip(array.shape, spec.shape, strict=True))
    np.testing.assert_array_equal(array, np.asarray(expected).astype(spec.dtype))


def test_json_is_the_historic_body() -> None:
    requests = prepare_requests(IMAGE, 4, 7, SEQ)
    assert [r.body for r in requests] == list(make_bodies(IMAGE, 4, 7, SEQ))
    assert {(r.path, r.content_type, r.headers) for r in requests} == {("/function/img", JSON, ())}
    for request, sample in zip(requests, _samples(IMAGE), strict=True):
        np.testing.assert_array_equal(orjson.loads(request.body)["inputs"], sample["x"])


def test_msgpack_carries_tensor_objects() -> None:
    for function in (IMAGE, TEXT):
        requests = prepare_requests(function, 4, 7, SEQ, "msgpack")
        for request, sample in zip(requests, _samples(function), strict=True):
            assert (request.path, request.content_type) == (f"/function/{function.name}", MSGPACK)
            inputs = msgspec.msgpack.decode(request.body)["inputs"]
            if len(function.inputs) == 1:
                inputs = {function.inputs[0].name: inputs}
            assert set(inputs) == {s.name for s in function.inputs}
            for spec in function.inputs:
                assert isinstance(inputs[spec.name]["data"], bytes)  # msgpack bin
                assert inputs[spec.name]["dtype"] == spec.dtype
                _assert_signature_tensor(_tensor(inputs[spec.name]), spec, sample[spec.name])
    lengths = {
        len(msgspec.msgpack.decode(r.body)["inputs"]["input_ids"]["data"]) // 8
        for r in prepare_requests(TEXT, 16, 7, SEQ, "msgpack")
    }
    assert len(lengths) > 1  # -1 dims still vary per sample
    assert lengths <= set(range(SEQ[0], SEQ[1] + 1))


def test_raw_is_the_input_bytes_with_dtype_and_shape_headers() -> None:
    requests = prepare_requests(IMAGE, 4, 7, SEQ, "raw")
    for request, sample in zip(requests, _samples(IMAGE), strict=True):
        assert (request.path, request.content_type) == ("/function/img", OCTET_STREAM)
        headers = dict(request.headers)
        assert headers == {"X-Infless-Dtype": "float32", "X-Infless-Shape": "3,4,4"}
        shape = tuple(int(d) for d in headers["X-Infless-Shape"].split(","))
        array = np.frombuffer(request.body, dtype="<f4").reshape(shape)
        _assert_signature_tensor(array, IMAGE.inputs[0], sample["x"])


def test_raw_refuses_several_inputs_naming_the_flag_and_function() -> None:
    with pytest.raises(FormatError, match=r"--format raw .* 'bert' takes 4 inputs"):
        prepare_requests(TEXT, 1, 0, SEQ, "raw")


def test_v2_json_sends_a_batch_of_one() -> None:
    requests = prepare_requests(TEXT, 4, 7, SEQ, "json", "v2")
    for request, sample in zip(requests, _samples(TEXT), strict=True):
        assert (request.path, request.content_type) == ("/v2/models/bert/infer", JSON)
        inputs = orjson.loads(request.body)["inputs"]
        assert [i["name"] for i in inputs] == [s.name for s in TEXT.inputs]
        assert [i["datatype"] for i in inputs] == ["INT64", "INT32", "BOOL", "FP16"]
        for entry, spec in zip(inputs, TEXT.inputs, strict=True):
            assert entry["shape"] == [1, *sample[spec.name].shape]
            array = np.asarray(entry["data"]).astype(spec.dtype).reshape(entry["shape"])[0]
            _assert_signature_tensor(array, spec, sample[spec.name])


def test_v2_raw_is_the_binary_tensor_extension() -> None:
    requests = prepare_requests(TEXT, 4, 7, SEQ, "raw", "v2")
    for request, sample in zip(requests, _samples(TEXT), strict=True):
        assert (request.path, request.content_type) == ("/v2/models/bert/infer", OCTET_STREAM)
        length = int(dict(request.headers)[V2_HEADER_LENGTH])
        header = orjson.loads(request.body[:length])
        assert header["outputs"] == [
            {"name": "logits", "parameters": {"binary_data": True}},
            {"name": "hidden", "parameters": {"binary_data": True}},
        ]
        offset = length
        for entry, spec in zip(header["inputs"], TEXT.inputs, strict=True):
            assert "data" not in entry
            size = entry["parameters"]["binary_data_size"]
            dtype = np.dtype(spec.dtype).newbyteorder("<")
            blob = request.body[offset : offset + size]
            array = np.frombuffer(blob, dtype=dtype).reshape(entry["shape"])[0]
            _assert_signature_tensor(array, spec, sample[spec.name])
            offset += size
        assert offset == len(request.body)
    plain = FunctionInfo("img", None, None, IMAGE.inputs)  # no outputs in its signature
    (request,) = prepare_requests(plain, 1, 0, SEQ, "raw", "v2")
    length = int(dict(request.headers)[V2_HEADER_LENGTH])
    assert orjson.loads(request.body[:length])["parameters"] == {"binary_data_output": True}


def test_v2_refuses_msgpack_and_dtypes_it_cannot_name() -> None:
    with pytest.raises(FormatError, match="--format msgpack is not available with --route v2"):
        prepare_requests(IMAGE, 1, 0, SEQ, "msgpack", "v2")
    odd = FunctionInfo("odd", None, None, (InputSpec("u", "uint32", (2,)),))
    with pytest.raises(FormatError, match="'uint32' has no V2 datatype"):
        prepare_requests(odd, 1, 0, SEQ, "json", "v2")


def test_the_same_seed_gives_the_same_values_in_every_format() -> None:
    json_body = orjson.loads(prepare_requests(IMAGE, 1, 3, SEQ)[0].body)["inputs"]
    raw_body = prepare_requests(IMAGE, 1, 3, SEQ, "raw")[0].body
    np.testing.assert_array_equal(
        np.frombuffer(raw_body, dtype="<f4").reshape(3, 4, 4), np.float32(json_body)
    )


def test_the_command_line_offers_every_format_and_route() -> None:
    assert cliargs.BODY_FORMATS == formats.BODY_FORMATS
    assert cliargs.ROUTES == formats.ROUTES


def test_signature_outputs_are_read_for_v2() -> None:
    status = {
        "name": "img",
        "signature": {
            "inputs": [{"name": "x", "dtype": "float32", "shape": [3, 4, 4]}],
            "outputs": [{"name": "probs", "dtype": "float32", "shape": [10]}, {"dtype": "x"}],
        },
    }
    assert parse_function_status(status).output_names == ("probs",)
    assert parse_function_status({"name": "plain"}).output_names == ()

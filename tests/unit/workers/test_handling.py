"""A handler around the batched forward: preprocess per request, one forward per batch,
postprocess per request; one request's failure is its own."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from infless.handlers import HandlerError, Request, Response
from infless.types import TensorSpec
from infless.workers import protocol as p
from infless.workers.handling import Arrays, collate, load_handler, serve_requests

SPECS = (TensorSpec("ids", "int64", (-1,)),)


class Lengths:
    """Text -> its code points; answers the sum of the row (padding adds nothing)."""

    def __init__(self, package_dir: Path) -> None:
        self.package_dir = package_dir

    def preprocess(self, request: Request) -> Arrays:
        text = request.text()
        if text == "refuse":
            raise HandlerError("refused on purpose", 422)
        if text == "crash":
            raise ValueError("boom")
        if text == "wrong":
            return {"ids": np.zeros((2, 2), dtype=np.int64)}
        return {"ids": np.array([ord(c) for c in text], dtype=np.int64)}

    def postprocess(self, outputs: Arrays) -> Response | object:
        total = int(outputs["total"])
        if total == ord("!"):
            raise RuntimeError("postprocess failed")
        if total == ord("b"):
            return Response(b"raw", "text/plain")
        return {"total": total, "echo": outputs["total"]}


def summing(arrays: Arrays) -> Arrays:
    return {"total": arrays["ids"].sum(axis=1)}


def _raw(text: str, postprocess: bool = True) -> p.RawRequest:
    return p.RawRequest(text.encode(), "text/plain", postprocess)


def test_collate_pads_variable_dimensions_with_zeros() -> None:
    batch = collate([{"ids": np.array([1, 2, 3])}, {"ids": np.array([4])}], SPECS)
    assert batch["ids"].tolist() == [[1, 2, 3], [4, 0, 0]]
    assert batch["ids"].dtype == np.int64


def test_every_request_gets_its_own_answer_from_one_forward() -> None:
    calls: list[int] = []

    def forward(arrays: Arrays) -> Arrays:
        calls.append(arrays["ids"].shape[0])
        return summing(arrays)

    answers = serve_requests(Lengths(Path()), [_raw("ab"), _raw("c"), _raw("b")], forward, SPECS)
    assert calls == [3]
    assert [a.status for a in answers] == [200, 200, 200]
    assert json.loads(answers[0].body) == {"total": 97 + 98, "echo": 195}
    assert answers[0].content_type == "application/json"
    assert (answers[2].body, answers[2].content_type) == (b"raw", "text/plain")


def test_one_bad_request_fails_alone_with_its_status_and_message() -> None:
    requests = [_raw("refuse"), _raw("a"), _raw("crash"), _raw("wrong"), _raw("!")]
    answers = serve_requests(Lengths(Path()), requests, summing, SPECS)
    statuses = [a.status for a in answers]
    assert statuses == [422, 200, 500, 500, 500]
    messages = [json.loads(a.body)["error"] for a in answers if a.status != 200]
    assert messages[0] == "refused on purpose"
    assert "ValueError: boom" in messages[1]
    assert "shape [2, 2]" in messages[2]
    assert "RuntimeError: postprocess failed" in messages[3]


def test_a_request_without_postprocess_gets_the_model_outputs() -> None:
    (answer,) = serve_requests(Lengths(Path()), [_raw("ab", postprocess=False)], summing, SPECS)
    assert answer.outputs is not None
    total = answer.outputs["total"]
    assert np.frombuffer(total.data, dtype=total.dtype).reshape(total.shape).tolist() == 195


def test_a_batch_where_every_request_fails_never_runs_the_forward() -> None:
    def forward(arrays: Arrays) -> Arrays:
        raise AssertionError("no sample survived preprocess")

    answers = serve_requests(Lengths(Path()), [_raw("refuse")], forward, SPECS)
    assert [a.status for a in answers] == [422]


def test_non_text_body_is_a_400() -> None:
    bad = p.RawRequest(b"\xff\xfe", "text/plain")
    (answer,) = serve_requests(Lengths(Path()), [bad], summing, SPECS)
    assert answer.status == 400
    assert "not UTF-8" in json.loads(answer.body)["error"]


def test_load_handler_names_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="expected 'module:Class'"):
        load_handler("no_colon", Path())
    with pytest.raises(ValueError, match="has no 'Missing'"):
        load_handler(f"{__name__}:Missing", Path())
    handler = load_handler(f"{__name__}:Lengths", Path("/pkg"))
    assert isinstance(handler, Lengths)
    assert handler.package_dir == Path("/pkg")

"""Signatures from the command line and from example tensors."""

from __future__ import annotations

import numpy as np
import pytest

from infless.packaging.signature import SignatureError, infer_specs, override, parse_spec
from infless.types import TensorSpec


def test_cli_specs() -> None:
    assert parse_spec("image:float32:3x224x224") == TensorSpec("image", "float32", (3, 224, 224))
    assert parse_spec("ids:int64:-1") == TensorSpec("ids", "int64", (-1,))
    assert parse_spec("flag:bool:") == TensorSpec("flag", "bool", ())


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("image:float32", "expected name:dtype:shape"),
        ("image:complex64:3", "dtype 'complex64' is not supported"),
        ("image:float32:3x?", "dimensions joined by 'x'"),
        ("image:float32:0x3", "positive, or -1"),
        ("1x:float32:3", "tensor name '1x'"),
    ],
)
def test_bad_cli_specs_say_what_is_wrong(text: str, words: str) -> None:
    with pytest.raises(SignatureError, match=words):
        parse_spec(text)


def test_examples_lose_their_batch_dimension_and_dynamic_dims_become_minus_one() -> None:
    examples = {"ids": np.zeros((2, 7), dtype=np.int64), "image": np.zeros((2, 3, 4, 4), "f4")}
    specs = infer_specs(examples, {"ids": [0]})
    assert specs == [
        TensorSpec("ids", "int64", (-1,)),
        TensorSpec("image", "float32", (3, 4, 4)),
    ]
    with pytest.raises(SignatureError, match="dynamic dimension 1 does not exist"):
        infer_specs(examples, {"ids": [1]})
    with pytest.raises(SignatureError, match="dynamic dimensions given for"):
        infer_specs(examples, {"mask": [0]})
    with pytest.raises(SignatureError, match="is a scalar"):
        infer_specs({"x": np.float32(1.0)})


def test_given_signatures_must_agree_with_the_examples() -> None:
    inferred = [TensorSpec("ids", "int64", (7,))]
    loosened = [TensorSpec("ids", "int64", (-1,))]
    assert override(inferred, loosened, what="input") == loosened
    assert override(inferred, None, what="input") == inferred
    with pytest.raises(SignatureError, match="given as int32, the example is int64"):
        override(inferred, [TensorSpec("ids", "int32", (7,))], what="input")
    with pytest.raises(SignatureError, match=r"given as ids: int64\[8\]"):
        override(inferred, [TensorSpec("ids", "int64", (8,))], what="input")
    with pytest.raises(SignatureError, match=r"the inputs given are \['x'\]"):
        override(inferred, [TensorSpec("x", "int64", (7,))], what="input")

"""The operator graph's data structure and JSON form."""

from __future__ import annotations

import pytest

from infless.profiler.graph import OperatorGraph, OpNode, OpSignature, TensorInfo


def _sig(kind: str, shape: tuple[int, ...]) -> OpSignature:
    return OpSignature(
        kind, f"function:torch.{kind}", '{"call":{}}', (TensorInfo(shape, "float32", 0),)
    )


def test_json_round_trip_keeps_everything() -> None:
    nodes = (
        OpNode("a", _sig("relu", (1, 8)), ()),
        OpNode("n", _sig("size", (1, 8)), ("a",), "python"),
        OpNode("b", _sig("tanh", (1, 8)), ("a", "n")),
    )
    graph = OperatorGraph("m", nodes, ("b",), "dispatch", module_calls=3, source_hash="abc")
    assert OperatorGraph.from_json(graph.to_json()) == graph


def test_nodes_must_be_in_topological_order() -> None:
    nodes = (OpNode("b", _sig("tanh", (1,)), ("a",)), OpNode("a", _sig("relu", (1,)), ()))
    with pytest.raises(ValueError, match="topological"):
        OperatorGraph("m", nodes, ("b",), "fx")


def test_equal_signatures_share_a_key_and_shapes_scale_with_batch() -> None:
    assert _sig("relu", (1, 8)).key == _sig("relu", (1, 8)).key
    assert _sig("relu", (1, 8)).key != _sig("relu", (1, 9)).key
    info = TensorInfo((3, 8), "float32", batch_axis=0)
    assert info.shape_at(4) == (12, 8)
    assert TensorInfo((5, 5), "float32").shape_at(4) == (5, 5)


def test_signatures_count_compute_operators_once() -> None:
    nodes = (
        OpNode("a", _sig("relu", (1, 8)), ()),
        OpNode("b", _sig("relu", (1, 8)), ("a",)),
        OpNode("c", _sig("size", (1, 8)), ("b",), "python"),
    )
    graph = OperatorGraph("m", nodes, ("c",), "fx")
    assert list(graph.signatures()) == [_sig("relu", (1, 8)).key]
    assert graph.count_by_class() == {"compute": 2, "python": 1}

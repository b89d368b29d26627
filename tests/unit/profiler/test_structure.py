"""Chain/branch decomposition and combination on hand-built graphs."""

from __future__ import annotations

import pytest

from infless.profiler.graph import CostClass, OperatorGraph, OpNode, OpSignature
from infless.profiler.structure import (
    EMPTY,
    Chain,
    Irreducible,
    Op,
    Parallel,
    block_cost,
    count_parallel,
    decompose,
    op_names,
)


def _graph(edges: dict[str, tuple[str, ...]], python: tuple[str, ...] = ()) -> OperatorGraph:
    nodes = []
    for name, deps in edges.items():
        cost_class: CostClass = "python" if name in python else "compute"
        nodes.append(
            OpNode(name, OpSignature(name, f"function:torch.{name}", "{}", ()), deps, cost_class)
        )
    used = {d for deps in edges.values() for d in deps}
    return OperatorGraph("g", tuple(nodes), tuple(n for n in edges if n not in used), "fx")


COSTS = {"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0, "e": 5.0, "f": 6.0}


def _cost(name: str) -> float:
    return COSTS.get(name, 0.0)


def test_a_chain_is_the_sum_of_its_operators() -> None:
    block = decompose(_graph({"a": (), "b": ("a",), "c": ("b",)}))
    assert block == Chain((Op("a"), Op("b"), Op("c")))
    assert block_cost(block, _cost, "max") == pytest.approx(6.0)
    assert block_cost(block, _cost, "sum") == pytest.approx(6.0)


def test_parallel_branches_cost_their_maximum_or_their_sum() -> None:
    # a -> (b -> c | d) -> e
    block = decompose(_graph({"a": (), "b": ("a",), "c": ("b",), "d": ("a",), "e": ("c", "d")}))
    assert isinstance(block, Chain)
    assert block.items[0] == Op("a")
    assert block.items[-1] == Op("e")
    branches = block.items[1]
    assert isinstance(branches, Parallel)
    assert set(branches.branches) == {Chain((Op("b"), Op("c"))), Op("d")}
    assert block_cost(block, _cost, "max") == pytest.approx(1 + max(2 + 3, 4) + 5)
    assert block_cost(block, _cost, "sum") == pytest.approx(1 + 2 + 3 + 4 + 5)


def test_a_residual_connection_is_a_branch_with_an_empty_side() -> None:
    block = decompose(_graph({"a": (), "b": ("a",), "c": ("b",), "e": ("c", "a")}))
    assert isinstance(block, Chain)
    assert [block.items[0], block.items[-1]] == [Op("a"), Op("e")]
    residual = block.items[1]
    assert isinstance(residual, Parallel)
    assert set(residual.branches) == {Chain((Op("b"), Op("c"))), EMPTY}
    assert block_cost(block, _cost, "max") == pytest.approx(11.0)
    assert count_parallel(block) == 1


def test_independent_inputs_are_parallel_from_the_start() -> None:
    block = decompose(_graph({"a": (), "b": (), "c": ("a", "b")}))
    assert isinstance(block, Chain)
    assert block.items[1:] == (Op("c"),)
    first = block.items[0]
    assert isinstance(first, Parallel)
    assert set(first.branches) == {Op("a"), Op("b")}
    assert block_cost(block, _cost, "max") == pytest.approx(2 + 3)


def test_nested_branches_combine_recursively() -> None:
    # a -> [ (b -> [c | d] -> e) | f ] -> (end)
    edges = {"a": (), "b": ("a",), "c": ("b",), "d": ("b",), "e": ("c", "d"), "f": ("a",)}
    edges_end = {**edges, "z": ("e", "f")}
    block = decompose(_graph(edges_end))
    inner = 2 + max(3, 4) + 5
    assert block_cost(block, _cost, "max") == pytest.approx(1 + max(inner, 6))
    assert count_parallel(block) == 2


def test_a_non_series_parallel_part_costs_its_longest_path() -> None:
    # the "N" graph: a -> c, a -> d, b -> d (no series-parallel reduction removes it all)
    block = decompose(_graph({"a": (), "b": (), "c": ("a",), "d": ("a", "b")}))
    assert isinstance(block, Irreducible)
    assert block_cost(block, _cost, "max") == pytest.approx(max(1 + 3, 1 + 4, 2 + 4))
    assert block_cost(block, _cost, "sum") == pytest.approx(1 + 2 + 3 + 4)
    assert sorted(op_names(block)) == ["a", "b", "c", "d"]


def test_shape_arithmetic_does_not_hide_the_chain() -> None:
    # "size" reads a's shape and feeds c: it must not turn a -> b -> c into a branch
    edges = {"a": (), "size": ("a",), "b": ("a",), "c": ("b", "size")}
    block = decompose(_graph(edges, python=("size",)))
    assert block == Chain((Op("a"), Op("b"), Op("c")))


def test_indexing_a_tuple_of_tensors_passes_the_dependency_on() -> None:
    # out = lstm(x)[0]; head(out): "getitem" on the tuple is python, but carries the data
    edges = {"a": (), "getitem": ("a",), "b": ("getitem",)}
    block = decompose(_graph(edges, python=("getitem",)))
    assert block == Chain((Op("a"), Op("b")))


def test_an_empty_graph_costs_nothing() -> None:
    graph = OperatorGraph("g", (), (), "fx")
    assert block_cost(decompose(graph), _cost, "max") == 0.0

"""The meta-operators on torch modules: each one, and every benchmark pair of the zoo's
families, gives a model bit-equal to the destination built fresh on the same input."""

from __future__ import annotations

import functools

import pytest
import torch
from torch import nn

from infless.models.build import build_meta_module
from infless.models.zoo import TRANSFORM_PAIRS, ZOO
from infless.transform.costs import MetaOpCosts
from infless.transform.describe import describe, describe_op
from infless.transform.graphcode import decode_graph, encode_graph
from infless.transform.planner import plan_transformation
from infless.workers.metaops import (
    TransformFailed,
    add,
    edge,
    execute_plan,
    reduce,
    replace,
    reshape,
)

COSTS = MetaOpCosts.default()


def _filled(module: nn.Module, seed: int) -> nn.Module:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, tensor in module.state_dict().items():
            if tensor.is_floating_point():
                tensor.copy_(torch.randn(tensor.shape, generator=generator) * 0.05)
                if name.endswith("running_var"):
                    tensor.abs_().add_(0.5)
    return module.eval()


def _fresh(cls: type[nn.Module], seed: int, **kwargs: object) -> nn.Module:
    return _filled(cls(**kwargs), seed)


def _same(a: nn.Module, b: nn.Module, *inputs: torch.Tensor) -> bool:
    with torch.inference_mode():
        return torch.equal(a(*inputs), b(*inputs))


def test_replace_swaps_the_weights_for_the_destinations() -> None:
    source = _fresh(nn.Conv2d, 1, in_channels=3, out_channels=8, kernel_size=3)
    dest = _fresh(nn.Conv2d, 2, in_channels=3, out_channels=8, kernel_size=3)
    replace(source, dict(dest.named_parameters()), describe_op("c", dest))
    assert _same(source, dest, torch.randn(1, 3, 9, 9))


@pytest.mark.parametrize(
    ("cls", "before", "after", "shape"),
    [
        (nn.Conv2d, {"in_channels": 3, "out_channels": 8, "kernel_size": 3},
         {"in_channels": 4, "out_channels": 16, "kernel_size": 5, "padding": 2, "stride": 2},
         (1, 4, 11, 11)),
        (nn.Conv2d, {"in_channels": 3, "out_channels": 8, "kernel_size": 3, "bias": True},
         {"in_channels": 3, "out_channels": 8, "kernel_size": 1, "bias": False}, (1, 3, 7, 7)),
        (nn.Linear, {"in_features": 8, "out_features": 4}, {"in_features": 16, "out_features": 2},
         (2, 16)),
        (nn.LayerNorm, {"normalized_shape": [8]}, {"normalized_shape": [32], "eps": 1e-12},
         (2, 32)),
        (nn.BatchNorm2d, {"num_features": 8}, {"num_features": 4}, (2, 4, 3, 3)),
        (nn.MaxPool2d, {"kernel_size": 2}, {"kernel_size": 3, "stride": 1}, (1, 2, 6, 6)),
    ],
)  # fmt: skip
def test_reshape_changes_properties_in_place(
    cls: type[nn.Module],
    before: dict[str, object],
    after: dict[str, object],
    shape: tuple[int, ...],
) -> None:
    module = _fresh(cls, 1, **before)
    dest = _fresh(cls, 2, **after)
    op = describe_op("op", dest)
    tensors = dict(dest.state_dict())
    reshape(module, op.props or {}, tensors, op)
    assert type(module) is cls  # the same operation object, reshaped: not a new one
    assert _same(module, dest, torch.randn(*shape))


def test_reduce_removes_an_operation() -> None:
    ops = {"a": nn.ReLU(), "b": nn.Tanh()}
    reduce(ops, "a")
    assert list(ops) == ["b"]


def test_add_creates_an_operation_with_its_tensors() -> None:
    dest = _fresh(nn.Linear, 3, in_features=6, out_features=5)
    created = add(describe_op("fc", dest), dict(dest.state_dict()))
    assert isinstance(created, nn.Linear)
    assert not created.training
    assert _same(created, dest, torch.randn(2, 6))
    with pytest.raises(TransformFailed, match="no tensor"):
        add(describe_op("fc", dest), {"weight": dest.state_dict()["weight"]})


def test_add_refuses_what_is_not_a_torch_operation() -> None:
    op = describe_op("x", nn.ReLU())
    bogus = type(op)("x", "os.system", {}, ())
    with pytest.raises(TransformFailed, match=r"not a torch\.nn operation"):
        add(bogus, {})


class _Pair(nn.Module):
    def __init__(self, first_relu: bool) -> None:
        super().__init__()
        self.first_relu = first_relu
        self.act = nn.ReLU()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.lin(self.act(x)) if self.first_relu else self.act(self.lin(x))
        return out


def test_edge_rewires_the_data_flow() -> None:
    """Optimus Figure 7-⑤: the same operations in the other order."""
    source, dest = _filled(_Pair(True), 1), _filled(_Pair(False), 1)
    nodes = describe(dest, "dest").nodes
    rebuilt = edge(nodes, dict(source.named_children()))
    x = torch.randn(3, 4)
    assert _same(rebuilt, dest, x)
    assert not _same(source, dest, x)


def test_graph_json_round_trip_gives_the_same_code() -> None:
    traced = torch.fx.symbolic_trace(build_meta_module(ZOO["bert-mini"]))
    again = decode_graph(encode_graph(traced.graph))

    def nodes(graph: torch.fx.Graph) -> list[tuple[str, str, str, str, str]]:
        return [(n.op, n.name, str(n.target), str(n.args), str(n.kwargs)) for n in graph.nodes]

    assert nodes(again) == nodes(traced.graph)


class _Branchy(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x if x.sum() > 0 else -x  # data-dependent: fx cannot trace it


def test_an_untraceable_model_is_not_transformable() -> None:
    structure = describe(_Branchy(), "branchy")
    assert not structure.transformable
    assert "fx cannot trace" in structure.reason
    plan = plan_transformation(structure, describe(nn.Sequential(nn.ReLU()), "r"), COSTS)
    assert not plan.feasible


@functools.cache
def _weights(name: str) -> dict[str, torch.Tensor]:
    seed = sum(map(ord, name))
    return dict(_filled(build_meta_module(ZOO[name]).to_empty(device="cpu"), seed).state_dict())


def _model(name: str) -> nn.Module:
    module = build_meta_module(ZOO[name])
    module.load_state_dict(_weights(name), assign=True)
    return module.eval()


def _inputs(name: str) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(3)
    result = []
    for spec in ZOO[name].inputs:
        if spec.dtype == "float32":  # small images: the models pool globally
            result.append(torch.randn(1, spec.shape[0], 32, 32, generator=generator))
        else:  # 16 tokens
            result.append(torch.randint(0, 2000, (1, 16), generator=generator))
    return result


@pytest.mark.parametrize(("source", "dest"), TRANSFORM_PAIRS)
def test_every_benchmark_pair_transforms_bit_equal(source: str, dest: str) -> None:
    src_structure = describe(build_meta_module(ZOO[source]), source)
    dst_structure = describe(build_meta_module(ZOO[dest]), dest)
    src_weights, dst_weights = _weights(source), _weights(dest)

    def same(s: str, d: str) -> bool:  # the store's content hash, in memory
        return s in src_weights and d in dst_weights and src_weights[s] is dst_weights[d]

    plan = plan_transformation(src_structure, dst_structure, COSTS, same)
    assert plan.feasible
    transformed, timings = execute_plan(
        _model(source), dst_structure, plan.steps, dst_weights.__getitem__
    )
    fresh = _model(dest)
    assert _same(transformed, fresh, *_inputs(dest)), f"{source} -> {dest}"
    assert set(timings.counts) <= {"replace", "reshape", "reduce", "add", "edge"}
    assert timings.counts["edge"] == 1

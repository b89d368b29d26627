"""Graph extraction: torch.fx with shape propagation, and the dispatch-tracer fallback."""

from __future__ import annotations

import json
from dataclasses import replace

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

from infless.profiler.encoding import memory_order
from infless.profiler.extract import extract_graph
from infless.profiler.graph import OperatorGraph, TensorInfo
from infless.profiler.structure import Parallel, count_parallel, decompose
from infless.profiler.targets import build_operator, make_tensor
from infless.types import TensorSpec

IMAGE = (TensorSpec("image", "float32", (3, 8, 8)),)


class Residual(nn.Module):
    """conv -> bn -> relu -> conv, plus the input (a residual branch), then a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 3, padding=1)
        self.conv1 = nn.Conv2d(4, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.conv2 = nn.Conv2d(4, 4, 3, padding=1)
        self.head = nn.Linear(4 * 8 * 8, 5)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = self.stem(image)
        y = self.conv2(torch.relu(self.bn(self.conv1(x))))
        z = x + y
        out: torch.Tensor = self.head(z.view(z.size(0), -1))
        return out


class DataDependent(nn.Module):
    """Control flow on tensor values: torch.fx cannot trace it."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(6, 6)
        self.b = nn.Linear(6, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(x)
        if h.sum() > -1e9:  # always true, but only known at run time
            h = h + self.b(torch.relu(h))
        return torch.softmax(h, dim=-1)


def _kinds(graph: OperatorGraph) -> list[str]:
    return [n.signature.kind for n in graph.nodes if n.cost_class == "compute"]


def test_fx_extraction_records_kinds_per_sample_shapes_and_the_residual_branch() -> None:
    graph = extract_graph(Residual(), IMAGE, model_key="residual")
    assert graph.tracer == "fx"
    assert _kinds(graph) == [
        "conv2d",
        "conv2d",
        "batchnorm2d",
        "relu",
        "conv2d",
        "add",
        "view",
        "linear",
    ]
    by_name = {n.name: n for n in graph.nodes}
    conv1 = by_name["conv1"].signature
    assert conv1.inputs[0].shape == (1, 4, 8, 8)
    assert conv1.inputs[0].batch_axis == 0
    init = json.loads(conv1.params)["init"]
    assert init["in_channels"] == 4
    assert init["out_channels"] == 4
    assert init["groups"] == 1
    # x.view(x.size(0), -1): the size is shape arithmetic, the view's first int grows with batch
    assert by_name["size"].cost_class == "python"
    assert '{"b":1}' in by_name["view"].signature.params
    assert by_name["add"].deps == ("stem", "conv2")
    structure = decompose(graph)
    assert count_parallel(structure) == 1
    assert any(isinstance(part, Parallel) for part in getattr(structure, "items", ()))
    # equal operators share a signature: conv1 and conv2 are the same operator
    assert conv1.key == by_name["conv2"].signature.key
    assert len(graph.signatures()) == len(graph.nodes) - 2  # minus the duplicate conv and size


def test_a_signature_rebuilds_its_operator_at_any_batch_size() -> None:
    graph = extract_graph(Residual(), IMAGE, model_key="residual")
    view = next(n for n in graph.nodes if n.name == "view").signature
    with torch.inference_mode():
        out = build_operator(view, 5).run()
    assert isinstance(out, torch.Tensor)
    assert out.shape == (5, 256)
    conv = next(n for n in graph.nodes if n.name == "conv1").signature
    with torch.inference_mode():
        out = build_operator(conv, 3).run()
    assert isinstance(out, torch.Tensor)
    assert out.shape == (3, 4, 8, 8)
    # weights cycled through copies, as a model's other operators would evict them
    rotating = build_operator(conv, 3, rotate_bytes=10_000)
    assert rotating.weight_bytes == (4 * 4 * 3 * 3 + 4) * 4
    assert rotating.copies == -(-10_000 // rotating.weight_bytes)
    with torch.inference_mode():
        shapes = {tuple(rotating.run().shape) for _ in range(rotating.copies + 1)}  # type: ignore[attr-defined]
    assert shapes == {(3, 4, 8, 8)}


def test_inputs_cycle_through_copies_holding_other_values() -> None:
    graph = extract_graph(Residual(), IMAGE, model_key="residual")
    view = next(n for n in graph.nodes if n.name == "view").signature  # returns its input
    one_input = 5 * 4 * 8 * 8 * 4
    built = build_operator(view, 5, rotate_input_bytes=3 * one_input)
    with torch.inference_mode():
        outputs = [built.run() for _ in range(4)]
    tensors = [o for o in outputs if isinstance(o, torch.Tensor)]
    assert len(tensors) == 4
    addresses = [t.data_ptr() for t in tensors]
    assert len(set(addresses[:3])) == 3
    assert addresses[3] == addresses[0]
    assert not torch.equal(tensors[0], tensors[1])  # new data, as a served model gets
    assert torch.equal(tensors[3], tensors[0])
    # an input larger than the rotation still alternates between two copies
    large = build_operator(view, 5, rotate_input_bytes=one_input // 2)
    with torch.inference_mode():
        pointers = [large.run().data_ptr() for _ in range(3)]  # type: ignore[attr-defined]
    assert pointers[0] != pointers[1]
    assert pointers[2] == pointers[0]
    # results live on for as many calls as there are input copies: each call writes a
    # block other than the one it freed a moment ago
    conv = next(n for n in graph.nodes if n.name == "conv1").signature
    writing = build_operator(conv, 5, rotate_input_bytes=one_input // 2)
    with torch.inference_mode():
        written = [writing.run().data_ptr() for _ in range(3)]  # type: ignore[attr-defined]
    assert len(set(written)) == 3
    reused = build_operator(view, 5)
    with torch.inference_mode():
        first, second = reused.run(), reused.run()
    assert isinstance(first, torch.Tensor)
    assert isinstance(second, torch.Tensor)
    assert first.data_ptr() == second.data_ptr()


def test_models_fx_cannot_trace_fall_back_to_the_dispatch_tracer() -> None:
    spec = (TensorSpec("x", "float32", (6,)),)
    graph = extract_graph(DataDependent(), spec, model_key="dd")
    assert graph.tracer == "dispatch"
    kinds = _kinds(graph)
    assert kinds[0] == "linear"
    assert kinds[-1] == "softmax"
    assert "relu" in kinds
    assert "add" in kinds
    assert graph.module_calls == 3  # the root and both Linear modules: none is profiled as such
    # dependencies come from tensor identity: the add joins the first linear and the second
    add = next(n for n in graph.nodes if n.signature.kind == "add")
    linears = [n.name for n in graph.nodes if n.signature.kind == "linear"]
    assert set(add.deps) == set(linears)
    assert OperatorGraph.from_json(graph.to_json()) == graph


def test_the_dispatch_tracer_also_sees_branches() -> None:
    graph = extract_graph(Residual(), IMAGE, model_key="residual", tracer="dispatch")
    assert graph.tracer == "dispatch"
    assert "conv2d" in _kinds(graph)
    assert count_parallel(decompose(graph)) >= 1
    conv = next(n for n in graph.nodes if n.signature.kind == "conv2d").signature
    # the functional form carries the weight as a batch-independent input
    assert [t.batch_axis for t in conv.inputs][:2] == [0, None]


def test_integer_inputs_keep_their_value_range() -> None:
    model = nn.Sequential(nn.Embedding(50, 8), nn.Flatten(), nn.Linear(32, 2))
    graph = extract_graph(model, (TensorSpec("ids", "int64", (4,)),), model_key="emb")
    embedding = graph.nodes[0].signature
    assert embedding.kind == "embedding"
    assert embedding.inputs[0].dtype == "int64"
    assert embedding.inputs[0].int_high is not None
    assert embedding.inputs[0].int_high <= 50


class Transposing(nn.Module):
    """Embeddings -> a transposed view made contiguous (a copy) -> a 1-D convolution."""

    def __init__(self) -> None:
        super().__init__()
        self.embedding = nn.Embedding(50, 8)
        self.conv = nn.Conv1d(8, 4, 3)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.conv(self.embedding(ids).transpose(1, 2).contiguous())
        return out


def test_a_transposed_input_is_rebuilt_in_its_memory_order() -> None:
    graph = extract_graph(Transposing(), (TensorSpec("ids", "int64", (6,)),), model_key="t")
    by_kind = {n.signature.kind: n.signature for n in graph.nodes}
    transposed = by_kind["contiguous"].inputs[0]
    assert transposed.shape == (1, 8, 6)
    assert transposed.order == (0, 2, 1)  # memory: batch, then the 6 positions, then the 8 dims
    assert by_kind["conv1d"].inputs[0].order is None  # the copy is contiguous
    with torch.inference_mode():
        copied = build_operator(by_kind["contiguous"], 3).run()
    assert isinstance(copied, torch.Tensor)
    assert copied.shape == (3, 8, 6)
    rebuilt = make_tensor(transposed, 3, torch.Generator().manual_seed(0))
    assert rebuilt.stride() == torch.zeros(3, 6, 8).transpose(1, 2).stride()
    assert OperatorGraph.from_json(graph.to_json()) == graph


def test_contiguous_inputs_keep_the_operator_keys_they_had() -> None:
    info = TensorInfo((1, 8, 6), "float32", 0)
    assert "order" not in info.to_json()  # so profiles keyed before layouts were recorded hold
    assert TensorInfo.from_json(replace(info, order=(0, 2, 1)).to_json()).order == (0, 2, 1)


def test_slices_are_not_taken_for_permuted_tensors() -> None:
    x = torch.zeros(2, 5, 7)
    assert memory_order(x) is None
    assert memory_order(x[:, -1]) is None  # a slice: not dense, rebuilt contiguous
    assert memory_order(x.permute(2, 0, 1)) == (1, 2, 0)


def test_a_lookup_reads_other_ids_on_every_call() -> None:
    graph = extract_graph(Transposing(), (TensorSpec("ids", "int64", (6,)),), model_key="t")
    lookup = next(n for n in graph.nodes if n.signature.kind == "embedding").signature
    assert lookup.is_lookup
    built = build_operator(lookup, 4)
    with torch.inference_mode():
        outputs = [built.run() for _ in range(3)]
    tensors = [o for o in outputs if isinstance(o, torch.Tensor) and o.shape == (4, 6, 8)]
    assert len(tensors) == 3
    assert not torch.equal(tensors[0], tensors[1])  # one table, other rows


def test_a_rebuilt_pointwise_convolution_runs_the_kernel_a_worker_runs() -> None:
    model = nn.Sequential(nn.Conv2d(3, 16, 1))
    graph = extract_graph(model, IMAGE, model_key="pointwise")
    (conv,) = graph.signatures().values()
    assert conv.target == "module:torch.nn.modules.conv.Conv2d"  # traced as PyTorch's own
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # where PyTorch alone would pick its native kernel below b16
    try:
        built = build_operator(conv, 8)
        with torch.inference_mode(), profile(activities=[ProfilerActivity.CPU]) as prof:
            built.run()
    finally:
        torch.set_num_threads(threads)
    kernels = {event.key for event in prof.key_averages()}
    assert "aten::mkldnn_convolution" in kernels
    assert "aten::_slow_conv2d_forward" not in kernels

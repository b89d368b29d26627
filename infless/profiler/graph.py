"""The operator DAG of a function's model as plain frozen data, and its JSON form.

A graph is what extraction (`infless.profiler.extract`) produces and what the predictor
consumes: nodes in topological order, each with an operator signature that determines its cost
and the names of the nodes it depends on. Shapes are per sample: a tensor's `batch_axis` holds
`per-sample size x batch` at run time, so one graph serves every batch size.

Torch-free and pure: no I/O beyond (de)serialising strings; the predictor imports it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Literal

GRAPH_FORMAT = 2
LOOKUP_KINDS = frozenset({"embedding", "embedding_bag"})

# Cost classes: a profiled tensor op ("compute"); int/shape arithmetic or tuple indexing, which
# costs nothing worth profiling ("python"); a tensor op that cannot be rebuilt alone ("opaque").
CostClass = Literal["compute", "python", "opaque"]
Tracer = Literal["fx", "dispatch"]


_DTYPE_BYTES = {
    "float64": 8,
    "int64": 8,
    "complex64": 8,
    "float32": 4,
    "int32": 4,
    "float16": 2,
    "bfloat16": 2,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
}


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """One tensor input of an operator, per sample.

    `shape[batch_axis]` is the size per sample (the run-time size is that times the batch);
    `batch_axis` is None for tensors that do not grow with the batch (weights, constants).
    `int_high` bounds the values of integer tensors (exclusive), e.g. token ids. `order` is
    the memory order of a tensor that is a permuted view of a dense one (a transpose): its
    dims from outermost to innermost, so `tensor.permute(order)` is contiguous; None for a
    contiguous tensor. What an operator costs can depend on it: `contiguous()` of a
    transposed tensor copies it, of a contiguous one does nothing.
    """

    shape: tuple[int, ...]
    dtype: str
    batch_axis: int | None = None
    int_high: int | None = None
    order: tuple[int, ...] | None = None

    def shape_at(self, batch_size: int) -> tuple[int, ...]:
        if self.batch_axis is None:
            return self.shape
        dims = list(self.shape)
        dims[self.batch_axis] *= batch_size
        return tuple(dims)

    def numel_per_sample(self) -> int:
        total = 1
        for dim in self.shape:
            total *= dim
        return total

    def bytes_per_sample(self) -> int:
        return self.numel_per_sample() * _DTYPE_BYTES.get(self.dtype, 4)

    def to_json(self) -> dict[str, object]:
        data: dict[str, object] = {
            "shape": list(self.shape),
            "dtype": self.dtype,
            "batch_axis": self.batch_axis,
            "int_high": self.int_high,
        }
        if self.order is not None:  # only then: contiguous inputs keep their operator keys
            data["order"] = list(self.order)
        return data

    @staticmethod
    def from_json(data: dict[str, object]) -> TensorInfo:
        shape = data["shape"]
        axis = data.get("batch_axis")
        high = data.get("int_high")
        order = data.get("order")
        if not isinstance(shape, list) or not isinstance(data["dtype"], str):
            raise ValueError(f"invalid tensor info {data!r}: needs shape (list) and dtype (str)")
        return TensorInfo(
            shape=tuple(int(d) for d in shape),
            dtype=data["dtype"],
            batch_axis=axis if isinstance(axis, int) else None,
            int_high=high if isinstance(high, int) else None,
            order=tuple(int(d) for d in order) if isinstance(order, list) else None,
        )


@dataclass(frozen=True, slots=True)
class OpSignature:
    """What determines an operator's cost.

    `target` is "module:<class path>", "function:<qualified name>" or "method:<Tensor method>";
    `params` is canonical JSON: {"init": constructor kwargs (modules only), "args": [...],
    "kwargs": {...}}, where {"t": i} refers to `inputs[i]` and {"b": k} is an int equal to
    k x batch. Two nodes with equal signatures cost the same, so they are profiled once.
    """

    kind: str
    target: str
    params: str
    inputs: tuple[TensorInfo, ...]

    @property
    def is_lookup(self) -> bool:
        """A table lookup (embedding): it reads the rows its ids pick, which differ from
        batch to batch, so the rows it reads are out of the caches however small the model."""
        return self.kind in LOOKUP_KINDS

    @property
    def key(self) -> str:
        payload = json.dumps(
            [self.target, self.params, [t.to_json() for t in self.inputs]],
            sort_keys=True,
            separators=(",", ":"),
        )
        return hashlib.sha256(payload.encode()).hexdigest()[:20]

    def describe(self) -> str:
        shapes = " ".join(
            "x".join(("b*" if i == t.batch_axis else "") + str(d) for i, d in enumerate(t.shape))
            for t in self.inputs
            if t.batch_axis is not None
        )
        return f"{self.kind}({shapes})" if shapes else self.kind

    def to_json(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "target": self.target,
            "params": self.params,
            "inputs": [t.to_json() for t in self.inputs],
        }

    @staticmethod
    def from_json(data: dict[str, object]) -> OpSignature:
        inputs = data["inputs"]
        kind, target, params = data["kind"], data["target"], data["params"]
        if not (isinstance(kind, str) and isinstance(target, str) and isinstance(params, str)):
            raise ValueError(f"invalid signature {data!r}: kind, target, params must be strings")
        if not isinstance(inputs, list):
            raise ValueError(f"invalid signature {data!r}: inputs must be a list")
        return OpSignature(kind, target, params, tuple(TensorInfo.from_json(t) for t in inputs))


def canonical_params(value: object) -> str:
    """The canonical JSON used for `OpSignature.params` (sorted keys, no spaces)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class OpNode:
    name: str
    signature: OpSignature
    deps: tuple[str, ...]
    cost_class: CostClass = "compute"


@dataclass(frozen=True, slots=True)
class OperatorGraph:
    """A model's operator DAG; `nodes` are in a topological (execution) order.

    `outputs` names the nodes whose results the model returns (the DAG's sinks);
    `module_calls` counts nn.Module calls whose own overhead no operator profile includes
    (container modules under fx; every module under the dispatch tracer).
    """

    model_key: str
    nodes: tuple[OpNode, ...]
    outputs: tuple[str, ...]
    tracer: Tracer
    module_calls: int = 0
    source_hash: str = ""
    weight_bytes: int = 0  # parameters and buffers: do they fit in the last-level cache?

    def __post_init__(self) -> None:
        seen: set[str] = set()
        for node in self.nodes:
            missing = [d for d in node.deps if d not in seen]
            if missing:
                raise ValueError(
                    f"graph {self.model_key!r}: node {node.name!r} depends on {missing}, which "
                    "do not come before it; nodes must be in topological order"
                )
            if node.name in seen:
                raise ValueError(f"graph {self.model_key!r}: duplicate node name {node.name!r}")
            seen.add(node.name)
        unknown = [o for o in self.outputs if o not in seen]
        if unknown:
            raise ValueError(f"graph {self.model_key!r}: outputs {unknown} are not nodes")

    def signatures(self) -> dict[str, OpSignature]:
        """Distinct profiled signatures by key."""
        return {n.signature.key: n.signature for n in self.nodes if n.cost_class == "compute"}

    def activation_bytes_per_sample(self) -> int:
        """Bytes of batched inputs the compute operators read per sample: the activations a
        forward streams through the caches besides its weights (an upper bound of the distinct
        bytes, as the allocator hands freed blocks out again)."""
        return sum(
            info.bytes_per_sample()
            for node in self.nodes
            if node.cost_class == "compute"
            for info in node.signature.inputs
            if info.batch_axis is not None
        )

    def count_by_class(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for node in self.nodes:
            counts[node.cost_class] = counts.get(node.cost_class, 0) + 1
        return counts

    def to_json(self) -> str:
        return json.dumps(
            {
                "format": GRAPH_FORMAT,
                "model_key": self.model_key,
                "tracer": self.tracer,
                "module_calls": self.module_calls,
                "source_hash": self.source_hash,
                "weight_bytes": self.weight_bytes,
                "outputs": list(self.outputs),
                "nodes": [
                    {
                        "name": n.name,
                        "deps": list(n.deps),
                        "cost_class": n.cost_class,
                        "signature": n.signature.to_json(),
                    }
                    for n in self.nodes
                ],
            },
            indent=1,
        )

    @staticmethod
    def from_json(text: str) -> OperatorGraph:
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("format") != GRAPH_FORMAT:
            raise ValueError(f"not an operator graph of format {GRAPH_FORMAT}")
        nodes = tuple(
            OpNode(
                name=str(n["name"]),
                signature=OpSignature.from_json(n["signature"]),
                deps=tuple(str(d) for d in n["deps"]),
                cost_class=_cost_class(n["cost_class"]),
            )
            for n in data["nodes"]
        )
        tracer = data["tracer"]
        if tracer not in ("fx", "dispatch"):
            raise ValueError(f"unknown tracer {tracer!r} in operator graph")
        return OperatorGraph(
            model_key=str(data["model_key"]),
            nodes=nodes,
            outputs=tuple(str(o) for o in data["outputs"]),
            tracer=tracer,
            module_calls=int(data["module_calls"]),
            source_hash=str(data.get("source_hash", "")),
            weight_bytes=int(data.get("weight_bytes", 0)),
        )


def _cost_class(value: object) -> CostClass:
    if value == "compute":
        return "compute"
    if value == "python":
        return "python"
    if value == "opaque":
        return "opaque"
    raise ValueError(f"unknown cost class {value!r} in operator graph")

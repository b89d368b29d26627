"""A model's structure as plain data: its operations (leaf modules) and its graph, and JSON.

Optimus §4.4 models a network as a graph whose nodes are operations and whose edges are data
flows; a transformation edits one graph into another. Here an operation (`Op`) is a leaf
module of the PyTorch model. It has:

- its qualified name (`target`);
- its type (`kind`, the module's class path: Optimus's operation type);
- the constructor properties that give its shape (`props`: kernel size, channels, hidden
  size, heads...);
- the tensors it holds.

The graph is the model's `torch.fx` graph in a JSON form (`nodes`: what Edge rebuilds);
planning only reads how many nodes it has.

`infless.transform.describe` (build side, torch) writes it as `ModelStructure.to_json`. The
planner (gateway side) and the meta-operators (worker side) read it: this is a record both
sides share. Pure: no I/O, no torch.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field

STRUCTURE_FORMAT = 1

_DTYPE_BYTES = {"float64": 8, "int64": 8, "float32": 4, "int32": 4, "float16": 2, "bfloat16": 2}


@dataclass(frozen=True, slots=True)
class OpTensor:
    """One parameter or buffer of an operation: its local name (`weight`), shape, dtype."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    buffer: bool = False

    @property
    def nbytes(self) -> int:
        count = 1
        for dim in self.shape:
            count *= dim
        return count * _DTYPE_BYTES.get(self.dtype, 1)


@dataclass(frozen=True, slots=True)
class Op:
    """One operation: a leaf module. `props` None: its constructor properties could not be
    read (the operation can be kept or replaced, never reshaped or added)."""

    target: str
    kind: str
    props: Mapping[str, object] | None
    tensors: tuple[OpTensor, ...] = ()

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)

    @property
    def short_kind(self) -> str:
        return self.kind.rsplit(".", 1)[-1]

    def state_names(self) -> tuple[str, ...]:
        """The state-dict names of its tensors (`layer1.0.conv1.weight`)."""
        return tuple(f"{self.target}.{t.name}" if self.target else t.name for t in self.tensors)

    def same_shape(self, other: Op) -> bool:
        """Same type, properties and tensor shapes: only the weights may differ (Replace)."""
        return (
            self.kind == other.kind
            and self.props is not None
            and self.props == other.props
            and [(t.name, t.shape, t.dtype) for t in self.tensors]
            == [(t.name, t.shape, t.dtype) for t in other.tensors]
        )


@dataclass(frozen=True, slots=True)
class ModelStructure:
    """A model's operations (in first-use order) and its fx graph (JSON node list).

    `transformable` False (with `reason`): the model cannot be rebuilt from its graph (an
    operation fx cannot describe); it may only be a normal start's. `digest` identifies the
    structure (not the weights): two packages of one architecture share it.
    """

    model_key: str
    ops: tuple[Op, ...]
    nodes: tuple[Mapping[str, object], ...] = field(default=())
    transformable: bool = True
    reason: str = ""

    @property
    def digest(self) -> str:
        payload = json.dumps(
            [[o.target, o.kind, o.props, [_tensor_json(t) for t in o.tensors]] for o in self.ops]
            + [list(self.nodes)],
            sort_keys=True,
            separators=(",", ":"),
            default=str,
        )
        return hashlib.sha256(payload.encode()).hexdigest()[:24]

    @staticmethod
    def untransformable(model_key: str, reason: str) -> ModelStructure:
        """A model that cannot be rebuilt from its graph, and why."""
        return ModelStructure(model_key=model_key, ops=(), transformable=False, reason=reason)

    def to_json(self) -> str:
        return json.dumps(
            {
                "format": STRUCTURE_FORMAT,
                "model_key": self.model_key,
                "transformable": self.transformable,
                "reason": self.reason,
                "ops": [
                    {
                        "target": o.target,
                        "kind": o.kind,
                        "props": None if o.props is None else dict(o.props),
                        "tensors": [_tensor_json(t) for t in o.tensors],
                    }
                    for o in self.ops
                ],
                "nodes": list(self.nodes),
            },
            separators=(",", ":"),
        )

    @staticmethod
    def from_json(text: str) -> ModelStructure:
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("format") != STRUCTURE_FORMAT:
            raise ValueError(
                f"not a model structure of format {STRUCTURE_FORMAT}: describe the package again"
            )
        ops = tuple(
            Op(
                target=str(o["target"]),
                kind=str(o["kind"]),
                props=o["props"] if isinstance(o["props"], dict) else None,
                tensors=tuple(
                    OpTensor(
                        name=str(t["name"]),
                        shape=tuple(t["shape"]),
                        dtype=str(t["dtype"]),
                        buffer=bool(t["buffer"]),
                    )
                    for t in o["tensors"]
                ),
            )
            for o in data["ops"]
        )
        return ModelStructure(
            model_key=str(data["model_key"]),
            ops=ops,
            nodes=tuple(data["nodes"]),
            transformable=bool(data["transformable"]),
            reason=str(data.get("reason", "")),
        )


def _tensor_json(tensor: OpTensor) -> dict[str, object]:
    return {
        "name": tensor.name,
        "shape": list(tensor.shape),
        "dtype": tensor.dtype,
        "buffer": tensor.buffer,
    }

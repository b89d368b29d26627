"""Offline profiling of the meta-operators (Optimus §4.4, Module 1) into the profile database.

For each operation type the zoo's models use, at three sizes, it times the real
meta-operators of `workers.metaops` on tensors mapped from files on tmpfs (as the store maps
them):

- Replace: map and assign the tensors;
- Reshape: change the properties from another size, then the tensors;
- Add: create the operation on the meta device, then the tensors;
- Reduce;
- Edge, over whole zoo graphs of 30 to 560 nodes.

A least-squares fit per type gives `fixed_us + per_tensor_us × tensors + per_mib_us × MiB`
(per node for Edge). It is stored in the `metaop_costs` table that the gateway reads
(`load_costs`).

    python -m infless.transform.profile [--state-dir state] [--repetitions 7]

Build side (imports torch); writes only the database and temporary tmpfs files.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from infless.clock import perf_s, wall_s
from infless.profiler.database import ProfileDatabase
from infless.profiler.prediction import default_db_path
from infless.transform.costdb import load_costs
from infless.transform.costs import MetaOp, MetaOpCosts
from infless.transform.describe import describe, describe_op
from infless.transform.structure import Op
from infless.weights.attach import map_tensor
from infless.weights.stored import StoredTensor
from infless.workers.metaops import add, edge, reduce, replace, reshape

# (kind's constructor, three sizes of keyword arguments)
_SHAPES: dict[type[nn.Module], tuple[dict[str, Any], ...]] = {
    nn.Conv2d: tuple(
        {"in_channels": c, "out_channels": c, "kernel_size": 3, "padding": 1, "bias": False}
        for c in (64, 256, 512)
    ),
    nn.Linear: tuple({"in_features": f, "out_features": f} for f in (256, 768, 2048)),
    nn.BatchNorm2d: tuple({"num_features": f} for f in (64, 512, 2048)),
    nn.LayerNorm: tuple({"normalized_shape": [f]} for f in (256, 768, 2048)),
    nn.Embedding: tuple(
        {"num_embeddings": n, "embedding_dim": d}
        for n, d in ((512, 256), (30522, 256), (30522, 768))
    ),
    nn.ReLU: ({"inplace": True},) * 3,
    nn.GELU: ({},) * 3,
    nn.MaxPool2d: tuple({"kernel_size": k} for k in (2, 3, 2)),
    nn.AdaptiveAvgPool2d: ({"output_size": 1},) * 3,
}
_EDGE_MODELS = ("vgg-11", "resnet-18", "bert-mini", "resnet-50", "bert-base", "resnet-152")


def _kind(cls: type[nn.Module]) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _median_us(run: Callable[[], object], repetitions: int) -> float:
    times = []
    for _ in range(repetitions):
        started = perf_s()
        run()
        times.append((perf_s() - started) * 1e6)
    return statistics.median(times)


def _stored_op(
    cls: type[nn.Module], kwargs: dict[str, object], root: Path
) -> tuple[Op, list[StoredTensor]]:
    with torch.device("meta"):
        meta = cls(**kwargs)
    op = describe_op("op", meta)
    stored = []
    for tensor in op.tensors:
        path = root / f"{cls.__name__}-{abs(hash((str(kwargs), tensor.name)))}.bin"
        data = torch.zeros(tensor.shape, dtype=getattr(torch, tensor.dtype))
        path.write_bytes(data.numpy().tobytes())
        stored.append(StoredTensor(tensor.name, str(path), tensor.dtype, list(tensor.shape)))
    return op, stored


def _mapped(stored: Sequence[StoredTensor]) -> dict[str, torch.Tensor]:
    return {s.name: map_tensor(s) for s in stored}


def _add(op: Op, stored: Sequence[StoredTensor]) -> None:
    add(op, _mapped(stored))


def _replace(module: nn.Module, op: Op, stored: Sequence[StoredTensor]) -> None:
    replace(module, _mapped(stored), op)


def _there_and_back(
    module: nn.Module,
    op: tuple[Op, Sequence[StoredTensor]],
    other: tuple[Op, Sequence[StoredTensor]],
) -> None:
    for target, stored in (other, op):
        reshape(module, target.props or {}, _mapped(stored), target)


def _reduce(module: nn.Module) -> None:
    reduce({"op": module}, "op")


def profile_kind(
    cls: type[nn.Module], root: Path, repetitions: int
) -> list[tuple[MetaOp, float, int, int]]:
    """(meta_op, µs, tensors, bytes) samples of one operation type at its three sizes."""
    samples: list[tuple[MetaOp, float, int, int]] = []
    ops = [_stored_op(cls, kwargs, root) for kwargs in _SHAPES[cls]]
    for index, (op, stored) in enumerate(ops):
        count, nbytes = len(op.tensors), op.nbytes
        module = add(op, _mapped(stored))
        other = ops[(index + 1) % len(ops)]
        both = ((count + len(other[0].tensors)) // 2, (nbytes + other[0].nbytes) // 2)
        samples += [
            ("add", _median_us(partial(_add, op, stored), repetitions), count, nbytes),
            (
                "replace",
                _median_us(partial(_replace, module, op, stored), repetitions),
                count,
                nbytes,
            ),
            (
                "reshape",
                _median_us(partial(_there_and_back, module, ops[index], other), repetitions) / 2,
                *both,
            ),
            ("reduce", _median_us(partial(_reduce, module), repetitions), 0, 0),
        ]
    return samples


def _fit(samples: Sequence[tuple[float, int, int]]) -> tuple[float, float, float]:
    """Non-negative least squares, by hand for three unknowns: drop negative terms, refit."""
    used = [0, 1, 2]
    while True:
        matrix = np.array([[1.0, t, b / 2**20][i] for _, t, b in samples for i in used]).reshape(
            len(samples), len(used)
        )
        target = np.array([us for us, _, _ in samples])
        solution, *_ = np.linalg.lstsq(matrix, target, rcond=None)
        negative = [u for u, v in zip(used, solution, strict=True) if v < 0 and u != 0]
        if not negative:
            result = [0.0, 0.0, 0.0]
            for u, v in zip(used, solution, strict=True):
                result[u] = max(0.0, float(v))
            return result[0], result[1], result[2]
        used = [u for u in used if u not in negative]


def profile_edge(repetitions: int) -> tuple[float, float, int]:
    """Edge's fixed µs and µs per node, over zoo graphs."""
    from infless.models.build import build_meta_module
    from infless.models.zoo import ZOO

    points = []
    for name in _EDGE_MODELS:
        model = build_meta_module(ZOO[name])
        structure = describe(model, name)
        ops = {op.target: model.get_submodule(op.target) for op in structure.ops}
        us = _median_us(partial(edge, structure.nodes, ops), repetitions)
        points.append((us, len(structure.nodes), 0))
    fixed, per_node, _ = _fit(points)
    return fixed, per_node, len(points)


def run(state_dir: Path, repetitions: int) -> MetaOpCosts:
    torch.set_num_threads(1)
    rows: list[tuple[str, str, float, float, float, int]] = []
    with tempfile.TemporaryDirectory(dir="/dev/shm") as tmp:
        for cls in _SHAPES:
            samples = profile_kind(cls, Path(tmp), repetitions)
            for meta_op in ("add", "replace", "reshape", "reduce"):
                points = [(us, t, b) for m, us, t, b in samples if m == meta_op]
                fixed, per_tensor, per_mib = _fit(points)
                rows.append((meta_op, _kind(cls), fixed, per_tensor, per_mib, len(points)))
    fixed, per_node, count = profile_edge(repetitions)
    rows.append(("edge", "*", fixed, per_node, 0.0, count))
    with ProfileDatabase(default_db_path(state_dir)) as db:
        db.set_metaop_costs(rows, wall_s())
    return load_costs(state_dir)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="profile the meta-operators' costs")
    parser.add_argument("--state-dir", type=Path, default=Path("state"))
    parser.add_argument("--repetitions", type=int, default=7)
    args = parser.parse_args(argv)
    costs = run(args.state_dir, args.repetitions)
    print(costs.to_json())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

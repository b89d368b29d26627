"""Series-parallel decomposition of an operator DAG into sequence chains and parallel branches.

INFless §3.3: a chain costs the sum of its parts, parallel branches cost the maximum of theirs.
The DAG is turned into a two-terminal edge graph (each operator an edge, each dependency an
empty edge) and reduced by series and parallel reductions until one edge remains; a part that
is not series-parallel stays an `Irreducible` block, costed by its longest path (branches run
concurrently) or its total (branches run one after another).

Pure: no I/O, no clock, no torch.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from infless.profiler.graph import OperatorGraph

# "max": branches overlap in time (the paper's rule; executors with inter-op parallelism or
# several GPU streams); "sum": branches run one after another (eager PyTorch on a CPU).
BranchMode = Literal["max", "sum"]


@dataclass(frozen=True, slots=True)
class Op:
    node: str


@dataclass(frozen=True, slots=True)
class Chain:
    items: tuple[Block, ...]


@dataclass(frozen=True, slots=True)
class Parallel:
    branches: tuple[Block, ...]


@dataclass(frozen=True, slots=True)
class Irreducible:
    """A non-series-parallel remainder: edges (from, to, block) between `source` and `sink`."""

    edges: tuple[tuple[int, int, Block], ...]
    source: int
    sink: int


Block = Op | Chain | Parallel | Irreducible
EMPTY = Chain(())


def _series(first: Block, second: Block) -> Block:
    items: list[Block] = []
    for part in (first, second):
        items.extend(part.items if isinstance(part, Chain) else (part,))
    return items[0] if len(items) == 1 else Chain(tuple(items))


def _parallel(first: Block, second: Block) -> Block:
    branches: list[Block] = []
    for part in (first, second):
        for branch in part.branches if isinstance(part, Parallel) else (part,):
            if branch == EMPTY and EMPTY in branches:
                continue  # one empty branch (a skip connection) says all there is to say
            branches.append(branch)
    if len(branches) == 1:
        return branches[0]
    return Parallel(tuple(branches))


class _EdgeGraph:
    def __init__(self) -> None:
        self.edges: dict[int, tuple[int, int, Block]] = {}
        self.out_edges: defaultdict[int, set[int]] = defaultdict(set)
        self.in_edges: defaultdict[int, set[int]] = defaultdict(set)
        self._next_id = 0

    def add(self, src: int, dst: int, block: Block) -> None:
        edge_id = self._next_id
        self._next_id += 1
        self.edges[edge_id] = (src, dst, block)
        self.out_edges[src].add(edge_id)
        self.in_edges[dst].add(edge_id)

    def remove(self, edge_id: int) -> tuple[int, int, Block]:
        src, dst, block = self.edges.pop(edge_id)
        self.out_edges[src].discard(edge_id)
        self.in_edges[dst].discard(edge_id)
        return src, dst, block

    def merge_parallel(self, vertex: int) -> set[int]:
        """Merge edges leaving `vertex` that share a target; returns touched vertices."""
        by_target: defaultdict[int, list[int]] = defaultdict(list)
        for edge_id in sorted(self.out_edges[vertex]):
            by_target[self.edges[edge_id][1]].append(edge_id)
        touched: set[int] = set()
        for dst, ids in by_target.items():
            if len(ids) < 2:
                continue
            block = self.remove(ids[0])[2]
            for edge_id in ids[1:]:
                block = _parallel(block, self.remove(edge_id)[2])
            self.add(vertex, dst, block)
            touched.update((vertex, dst))
        return touched


def _tensor_nodes(graph: OperatorGraph) -> tuple[list[str], dict[str, tuple[str, ...]]]:
    """Tensor operators and their tensor-operator dependencies.

    "python" nodes cost next to nothing and are left out. Shape arithmetic (`batch =
    x.shape[0]`) fans out to many consumers and would hide every chain, so dependencies
    through it are dropped (a shape is known before the values behind it); indexing a tuple of
    tensors (`lstm(x)[0]`) passes data on, so its consumers inherit its dependencies.
    """
    inherited: dict[str, tuple[str, ...]] = {}
    nodes: list[str] = []
    deps_of: dict[str, tuple[str, ...]] = {}
    for node in graph.nodes:
        deps = tuple(dict.fromkeys(d for dep in node.deps for d in inherited.get(dep, (dep,))))
        if node.cost_class != "python":
            nodes.append(node.name)
            deps_of[node.name] = deps
        else:
            inherited[node.name] = deps if node.signature.kind == "getitem" else ()
    return nodes, deps_of


def decompose(graph: OperatorGraph) -> Block:
    """The chain/branch structure of `graph`, in execution order where it is a chain."""
    source, sink = 0, 1
    nodes, deps_of = _tensor_nodes(graph)
    index = {name: i for i, name in enumerate(nodes)}
    eg = _EdgeGraph()
    has_successor: set[str] = set()
    for i, name in enumerate(nodes):
        eg.add(2 + 2 * i, 3 + 2 * i, Op(name))
        for dep in deps_of[name]:
            eg.add(3 + 2 * index[dep], 2 + 2 * i, EMPTY)
            has_successor.add(dep)
        if not deps_of[name]:
            eg.add(source, 2 + 2 * i, EMPTY)
    for i, name in enumerate(nodes):
        if name not in has_successor or name in graph.outputs:
            eg.add(3 + 2 * i, sink, EMPTY)
    if not nodes:
        return EMPTY

    queue: deque[int] = deque(sorted(set(eg.out_edges) | set(eg.in_edges)))
    queued = set(queue)
    while queue:
        vertex = queue.popleft()
        queued.discard(vertex)
        touched = eg.merge_parallel(vertex)
        series = len(eg.in_edges[vertex]) == 1 and len(eg.out_edges[vertex]) == 1
        if series and vertex not in (source, sink):
            src, _, first = eg.remove(next(iter(eg.in_edges[vertex])))
            _, dst, second = eg.remove(next(iter(eg.out_edges[vertex])))
            eg.add(src, dst, _series(first, second))
            touched.update((src, dst))
        for other in sorted(touched - queued):
            queue.append(other)
            queued.add(other)
    remaining = list(eg.edges.values())
    if len(remaining) == 1 and remaining[0][:2] == (source, sink):
        return remaining[0][2]
    return Irreducible(tuple(remaining), source, sink)


def block_cost(block: Block, op_cost: Callable[[str], float], mode: BranchMode) -> float:
    """The cost of `block` given each operator's cost: chains add, branches combine by `mode`."""
    if isinstance(block, Op):
        return op_cost(block.node)
    if isinstance(block, Chain):
        return sum(block_cost(item, op_cost, mode) for item in block.items)
    if isinstance(block, Parallel):
        costs = [block_cost(branch, op_cost, mode) for branch in block.branches]
        return max(costs) if mode == "max" else sum(costs)
    return _irreducible_cost(block, op_cost, mode)


def _irreducible_cost(
    block: Irreducible, op_cost: Callable[[str], float], mode: BranchMode
) -> float:
    weights = [(src, dst, block_cost(inner, op_cost, mode)) for src, dst, inner in block.edges]
    if mode == "sum":
        return sum(w for _, _, w in weights)
    out: defaultdict[int, list[tuple[int, float]]] = defaultdict(list)
    indegree: defaultdict[int, int] = defaultdict(int)
    for src, dst, w in weights:
        out[src].append((dst, w))
        indegree[dst] += 1
    longest: dict[int, float] = {block.source: 0.0}
    ready = deque([block.source])
    while ready:
        vertex = ready.popleft()
        for dst, w in out[vertex]:
            longest[dst] = max(longest.get(dst, 0.0), longest.get(vertex, 0.0) + w)
            indegree[dst] -= 1
            if indegree[dst] == 0:
                ready.append(dst)
    return longest.get(block.sink, 0.0)


def count_parallel(block: Block) -> int:
    """How many parallel-branch groups the structure holds (irreducible parts count once)."""
    if isinstance(block, Chain):
        return sum(count_parallel(item) for item in block.items)
    if isinstance(block, Parallel):
        return 1 + sum(count_parallel(branch) for branch in block.branches)
    if isinstance(block, Irreducible):
        return 1 + sum(count_parallel(inner) for _, _, inner in block.edges)
    return 0


def op_names(block: Block) -> list[str]:
    """Every operator in `block`, depth first."""
    if isinstance(block, Op):
        return [block.node]
    if isinstance(block, Chain):
        return [name for item in block.items for name in op_names(item)]
    if isinstance(block, Parallel):
        return [name for branch in block.branches for name in op_names(branch)]
    return [name for _, _, inner in block.edges for name in op_names(inner)]

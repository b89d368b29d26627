"""The optimal transformation cost (Optimus §4.4, Module 2): a minimum-cost assignment.

It builds the (n + m) × (n + m) cost matrix of Optimus Figure 10 (Riesen and Bunke's graph
edit distance):

- top left: transforming source operation i into destination operation j (Replace or
  Reshape; operations of different types cannot be transformed: ∞);
- top right: removing i (Reduce), on the diagonal;
- bottom left: adding j (Add), on the diagonal;
- bottom right: zeros.

The Hungarian method solves it in O((n + m)³), so it runs only for small pairs: it measures
how far the group-based plan (`planner.plan_transformation`) is from the optimum. Edge is the
same for both and is added once. Pure: no I/O, no clock, no torch.
"""

from __future__ import annotations

from infless.transform.costs import MetaOpCosts
from infless.transform.structure import ModelStructure, Op

_NEVER = 1e12  # "∞": never chosen while a finite assignment exists


def _pair_us(src: Op, dst: Op, costs: MetaOpCosts) -> float:
    if src.kind != dst.kind:
        return _NEVER
    if src.same_shape(dst):
        return costs.us("replace", dst.kind, len(dst.tensors), dst.nbytes)
    if src.props is None or dst.props is None:
        return _NEVER
    return costs.us("reshape", dst.kind, len(dst.tensors), dst.nbytes)


def assignment(matrix: list[list[float]]) -> list[int]:
    """The Hungarian method (potentials, O(N³)): column assigned to each row, minimum cost."""
    size = len(matrix)
    u, v = [0.0] * (size + 1), [0.0] * (size + 1)
    match, way = [0] * (size + 1), [0] * (size + 1)
    for row in range(1, size + 1):
        match[0] = row
        column = 0
        least = [float("inf")] * (size + 1)
        used = [False] * (size + 1)
        while True:
            used[column] = True
            current, delta, next_column = match[column], float("inf"), 0
            for j in range(1, size + 1):
                if not used[j]:
                    reduced = matrix[current - 1][j - 1] - u[current] - v[j]
                    if reduced < least[j]:
                        least[j], way[j] = reduced, column
                    if least[j] < delta:
                        delta, next_column = least[j], j
            for j in range(size + 1):
                if used[j]:
                    u[match[j]] += delta
                    v[j] -= delta
                else:
                    least[j] -= delta
            column = next_column
            if match[column] == 0:
                break
        while column:
            previous = way[column]
            match[column] = match[previous]
            column = previous
    result = [0] * size
    for j in range(1, size + 1):
        result[match[j] - 1] = j - 1
    return result


def optimal_cost_ms(source: ModelStructure, dest: ModelStructure, costs: MetaOpCosts) -> float:
    """The minimum predicted cost of any transformation from `source` to `dest`."""
    n, m = len(source.ops), len(dest.ops)
    size = n + m
    matrix = [[0.0] * size for _ in range(size)]
    for i, src in enumerate(source.ops):
        for j, dst in enumerate(dest.ops):
            matrix[i][j] = _pair_us(src, dst, costs)
        for j in range(n):
            matrix[i][m + j] = costs.us("reduce", src.kind) if j == i else _NEVER
    for i, dst in enumerate(dest.ops):
        for j in range(m):
            added = costs.us("add", dst.kind, len(dst.tensors), dst.nbytes)
            matrix[n + i][j] = added if j == i else _NEVER
    columns = assignment(matrix)
    total = sum(matrix[row][col] for row, col in enumerate(columns))
    return (total + costs.edge_us(len(dest.nodes))) / 1000.0

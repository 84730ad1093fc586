"""Phase 2: noisy FP-trees (Alg. 2) and FP-growth of noisy supports (Alg. 3).

One tree per maximal pattern ``P`` found in phase 1, over ``P``'s words in a
fixed order. As Alg. 2 does, the tree has a node for *every* subset of ``P`` (a
node per path prefix, ``2^|P| - 1`` nodes besides the root), created whether or
not any frame has it, and every node's count starts at ``Lap(scale)``: which
nodes exist then says nothing about the data.

Counting (Alg. 3, lines 3-10), as implemented: a frame's words restricted to
``P`` form one path; we add 1 to the node where that path *ends* only, then
aggregate bottom-up (``n.count <- n.end + sum(child.count)``, lines 9-10), so a
node's count is the number of frames whose path passes through it, plus the
noise of its whole subtree. Alg. 3 as printed adds 1 to every node on the path
(line 8) *and* then adds the children's counts (line 10), which counts a frame
once per node below it; its per-tree sensitivity would then be ``|P|``, not the
1 that Theorem 2 uses. With end-node counting, adding or removing one frame
changes exactly one end count by 1 (or none, if it has no word of ``P``): the
end counts are a histogram with sensitivity 1, and ``Lap(scale)`` on each is
``(1 / scale)``-DP per tree. With ``m`` trees the release is ``m / scale``-DP by
sequential composition; :func:`noisy_supports` sets ``scale = m / epsilon``.
The paper's ``Lap(k / eps_2)`` is the case ``m = k``; Theorem 2 composes over the
"k outputs", but the trees are what touch the data, so it is ``m`` that counts
(we keep at most ``k`` maximal patterns, so ``m <= k``).

FP-growth (:meth:`FPTree.growth`) runs on the aggregated noisy counts: the
support of a pattern is the sum of the counts of the nodes of its last word
whose path contains it, found through conditional pattern bases. Alg. 3's
single-path shortcut (``min`` of the node counts) is not used: with noisy
counts the minimum is biased downwards; the general recursion gives the deepest
node's count, which is what the minimum equals on exact counts.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

import numpy as np
from numpy.typing import NDArray

from privacy.dpcode.itemsets import Pattern
from privacy.dpcode.laplace import laplace
from privacy.noise import NoiseSource


class FPNode:
    """One FP-tree node: ``item``, ``end`` (paths ending here), ``count``, children."""

    __slots__ = ("item", "end", "count", "children", "parent")

    def __init__(self, item: int | None, parent: FPNode | None) -> None:
        self.item = item
        self.end = 0.0
        self.count = 0.0
        self.children: dict[int, FPNode] = {}
        self.parent = parent

    def path(self) -> list[int]:
        """Items from the root down to this node."""
        items: list[int] = []
        node: FPNode | None = self
        while node is not None and node.item is not None:
            items.append(node.item)
            node = node.parent
        return items[::-1]


class FPTree:
    """An FP-tree with real-valued counts (exact, or noisy after Alg. 2).

    Parameters
    ----------
    order : sequence of int
        The word order of every path (a word's position in it is its rank).
    """

    def __init__(self, order: Sequence[int]) -> None:
        self.root = FPNode(None, None)
        self.rank = {int(w): i for i, w in enumerate(order)}
        self.header: dict[int, list[FPNode]] = {}

    def _node(self, path: Sequence[int]) -> FPNode:
        node = self.root
        for item in path:
            child = node.children.get(item)
            if child is None:
                child = FPNode(item, node)
                node.children[item] = child
                self.header.setdefault(item, []).append(child)
            node = child
        return node

    def sorted_path(self, items: Sequence[int]) -> list[int]:
        """``items`` in the tree's order."""
        return sorted((int(i) for i in items), key=self.rank.__getitem__)

    def insert(self, items: Sequence[int], weight: float = 1.0) -> None:
        """Insert a path as a standard FP-tree does: ``weight`` on every node of it."""
        node = self.root
        for item in self.sorted_path(items):
            node = node.children.get(item) or self._node([*node.path(), item])
            node.count += weight
        node.end += weight

    def nodes(self) -> Iterator[FPNode]:
        """Every node except the root, parents before children."""
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node.children.values())

    def aggregate(self) -> None:
        """Alg. 3 lines 9-10: ``count <- end + sum(child.count)``, bottom-up."""
        for node in reversed(list(self.nodes())):
            node.count = node.end + sum(c.count for c in node.children.values())

    def growth(self, suffix: Pattern = ()) -> dict[Pattern, float]:
        """FP-growth: the (noisy) support of every pattern the tree holds.

        Returns
        -------
        dict
            Sorted word tuple -> summed count of the nodes that contain it.
        """
        out: dict[Pattern, float] = {}
        for item in sorted(self.header, key=self.rank.__getitem__, reverse=True):
            nodes = self.header[item]
            pattern = tuple(sorted((*suffix, item)))
            out[pattern] = float(sum(n.count for n in nodes))
            conditional = FPTree(
                [w for w in self.rank if self.rank[w] < self.rank[item]]
            )
            for n in nodes:
                prefix = n.path()[:-1]
                if prefix:
                    conditional.insert(prefix, n.count)
            if conditional.header:
                out.update(conditional.growth(pattern))
        return out


class NoisyFPTree(FPTree):
    """Alg. 2: the tree of one pattern, every node created with count ``Lap(scale)``.

    Parameters
    ----------
    pattern : sequence of int
        The maximal pattern ``P``; the tree has one node per non-empty subset.
    order : sequence of int
        Word order of the paths (must contain every word of ``pattern``).
    scale : float
        Laplace scale of each node's initial count.
    noise : NoiseSource
        Where the noise comes from.
    """

    def __init__(
        self,
        pattern: Sequence[int],
        order: Sequence[int],
        *,
        scale: float,
        noise: NoiseSource,
    ) -> None:
        super().__init__(order)
        self.pattern = self.sorted_path(pattern)
        subsets = [
            list(s)
            for j in range(1, len(self.pattern) + 1)
            for s in itertools.combinations(self.pattern, j)
        ]
        self.by_subset: dict[frozenset[int], FPNode] = {}
        for s in subsets:
            self.by_subset[frozenset(s)] = self._node(s)
        start = laplace(scale, len(self.by_subset), noise)
        for node, value in zip(self.nodes(), start, strict=True):
            node.end = float(value)

    def count_frames(self, matrix: NDArray[np.bool_]) -> None:
        """Alg. 3 lines 3-8 with end-node counting: each frame adds 1 to one node.

        Frame ``i``'s path is its words in ``P``; the node of that subset gets +1
        (frames with no word of ``P`` touch no node).
        """
        cols = np.asarray(matrix, dtype=bool)[:, self.pattern]
        codes = cols.astype(np.int64) @ (1 << np.arange(len(self.pattern)))
        hist = np.bincount(codes, minlength=1 << len(self.pattern))
        for code in np.flatnonzero(hist[1:]) + 1:
            subset = frozenset(
                w for j, w in enumerate(self.pattern) if (int(code) >> j) & 1
            )
            self.by_subset[subset].end += float(hist[code])


def noisy_supports(
    matrix: NDArray[np.bool_],
    maximal: Sequence[Pattern],
    *,
    order: Sequence[int],
    epsilon: float,
    noise: NoiseSource,
) -> dict[Pattern, float]:
    """Phase 2: noisy supports of every sub-pattern of the maximal patterns.

    Builds one :class:`NoisyFPTree` per maximal pattern with node noise
    ``Lap(m / epsilon)`` (``m = len(maximal)``), counts the frames, aggregates
    and runs FP-growth. A pattern inside several maximal patterns gets the
    inverse-variance mean of its estimates (post-processing): from the tree of
    ``P`` the estimate of ``Q`` sums ``2^(|P| - |Q|)`` noisy end counts.

    Returns
    -------
    dict
        Pattern -> noisy support. ``epsilon``-DP per frame (add/remove).
    """
    if not maximal:
        return {}
    scale = len(maximal) / epsilon
    sums: dict[Pattern, float] = {}
    weights: dict[Pattern, float] = {}
    for p in maximal:
        tree = NoisyFPTree(p, order, scale=scale, noise=noise)
        tree.count_frames(matrix)
        tree.aggregate()
        for q, value in tree.growth().items():
            w = 2.0 ** -(len(p) - len(q))
            sums[q] = sums.get(q, 0.0) + w * value
            weights[q] = weights.get(q, 0.0) + w
    return {q: sums[q] / weights[q] for q in sums}

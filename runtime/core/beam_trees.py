"""The wire and verifier forms of DSBD's draft trees: what a beam worker sends (``BeamTree``, in its wire form
``to_arrays`` / ``from_arrays``) and the forest the verifier combines the trees into (``BeamDraft``).
Drafting one tree is workers/beam_drafter.py's; combining and verifying them, scheduler/beam_*.py's.

How the models read a tree. Nodes are listed in layer order (within a layer, in drawing order); a node's
parent is a position in the same tree, -1 for the input beam itself. A model reads the tree after the
beam's context as ``lay_out`` does, so the node at tree position j sits at cache index len(context) + j.
Draft and target share this rule; the target reads each tree in the forest's order (``BeamDraft.trees``).

``BeamDraft`` is that forest: the layers the verifier combines the trees into (``BeamLayer``, nodes indexed
over the whole layer) and, per input beam, its nodes as the target reads them (``Tree``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["BeamDraft", "BeamLayer", "BeamTree", "Tree", "TreeLayer", "tree_positions"]

NO_NODES = np.zeros(0, dtype=np.int64)


@dataclass(frozen=True, slots=True)
class TreeLayer:
    """Layer l of one input beam's tree: n nodes, each a (parent, token) cell of q over this tree's layer l-1."""
    parents: np.ndarray   # [n] int: index among this tree's nodes of layer l-1 (layer 1: 0, the input beam)
    tokens: np.ndarray    # [n] int
    q: np.ndarray | None  # [n_above, V] float64 holding float32 values: q_b^(l) up to float32 rounding,
                          # its float64 renormalisation is what the nodes were drawn from; None when greedy

    def __post_init__(self) -> None:
        if len(self.parents) != len(self.tokens):
            raise ValueError(f"a tree layer needs one parent per token, got {len(self.parents)} and "
                             f"{len(self.tokens)}")
        if self.q is not None and self.q.ndim != 2:
            raise ValueError(f"a tree layer's q is [nodes above, V], got shape {self.q.shape}")

    @property
    def drawn_from(self) -> np.ndarray:
        """q_b^(l) as the nodes were drawn from it and are verified against: ``q`` renormalised in float64."""
        return self.q / self.q.sum()


@dataclass(frozen=True, slots=True)
class BeamTree:
    """The tree one draft process grows from its input beam: ``gamma`` layers, some possibly empty."""
    layers: tuple[TreeLayer, ...]
    forwards: int = 0  # draft forwards it took

    @property
    def sizes(self) -> np.ndarray:
        """[L] nodes per layer: the counts it was drafted for."""
        return np.array([len(layer.tokens) for layer in self.layers], dtype=np.int64)

    def to_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        """The wire form: (tokens [n], parents [n] tree positions in read order with -1 = the input beam,
        layer_sizes [L], q_rows [R, V] float32: every layer's q stacked, or None when greedy)."""
        sizes = self.sizes
        starts = np.concatenate([[0], np.cumsum(sizes)])  # tree position of each layer's first node
        tokens, parents = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
        for depth, layer in enumerate(self.layers):
            tokens.append(layer.tokens)
            parents.append(starts[depth - 1] + layer.parents if depth else np.full(len(layer.tokens), -1))
        tokens, parents = np.concatenate(tokens), np.concatenate(parents)
        if not self.layers or self.layers[0].q is None:
            q_rows = None
        else:
            q_rows = np.concatenate([layer.q for layer in self.layers]).astype(np.float32)
        return tokens.astype(np.int32), parents.astype(np.int32), sizes.astype(np.int32), q_rows

    @classmethod
    def from_arrays(cls, tokens: np.ndarray, parents: np.ndarray, layer_sizes: np.ndarray,
                    q_rows: np.ndarray | None, *, forwards: int = 0) -> BeamTree:
        """The tree ``to_arrays`` sent; ValueError when the arrays do not form one."""
        tokens, parents = np.asarray(tokens, dtype=np.int64), np.asarray(parents, dtype=np.int64)
        sizes = np.asarray(layer_sizes, dtype=np.int64)
        if sizes.ndim != 1 or np.any(sizes < 0) or not tokens.shape == parents.shape == (sizes.sum(),) \
                or np.any(tokens < 0):
            raise ValueError(f"a tree of layer sizes {sizes.tolist()} needs that many tokens (>= 0) and parents, "
                             f"got {tokens.shape} and {parents.shape}")
        above = np.concatenate([[1], sizes[:-1]])[:len(sizes)]  # nodes each layer's parents are among
        if q_rows is not None and (q_rows.ndim != 2 or len(q_rows) != above.sum()):
            raise ValueError(f"q_rows is {q_rows.shape}, expected [{above.sum()}, V]: one row per node above")
        if q_rows is not None and not np.all(np.isfinite(q_rows) & (q_rows >= 0)):
            raise ValueError("q_rows holds a negative or non-finite probability")
        starts = np.concatenate([[-1, 0], np.cumsum(sizes)])  # starts[l]: tree position of layer l's first node
        row_starts = np.concatenate([[0], np.cumsum(above)])
        layers = []
        for depth, (n, n_above) in enumerate(zip(sizes, above)):
            span = slice(starts[depth + 1], starts[depth + 1] + n)
            local = parents[span] - starts[depth]
            if np.any(local < 0) or np.any(local >= n_above):
                raise ValueError(f"layer {depth + 1}: a parent outside the layer above")
            q = None if q_rows is None else q_rows[row_starts[depth]:row_starts[depth + 1]].astype(np.float64)
            if q is not None and n and not (np.all(tokens[span] < q.shape[1]) and np.all(q[local, tokens[span]] > 0)):
                raise ValueError(f"layer {depth + 1}: a node on a cell its q gives no mass")
            layers.append(TreeLayer(local, tokens[span], q))
        return cls(tuple(layers), forwards)


@dataclass(frozen=True, slots=True)
class BeamLayer:
    """Layer l of a draft forest: n_l nodes, each a (parent, token) cell of the draft's q over layer l-1."""
    parents: np.ndarray   # [n_l] int: the node of layer l-1 it extends (layer 1: an input beam)
    tokens: np.ndarray    # [n_l] int
    q: np.ndarray | None  # [n_{l-1}, V] float64: the distribution the nodes were drawn from (None: greedy)
    roots: np.ndarray     # [n_l] int: the input beam the node grows from


@dataclass(frozen=True, slots=True)
class Tree:
    """One input beam's nodes in the order a model reads them after the beam's context."""
    tokens: np.ndarray   # [n] int
    parents: np.ndarray  # [n] int: tree position of the parent, -1 = the input beam
    layers: np.ndarray   # [n] int: the node's layer, 0-based
    nodes: np.ndarray    # [n] int: the node's index in its layer


@dataclass(frozen=True, slots=True)
class BeamDraft:
    """A draft forest: ``gamma`` layers grown from ``width_in`` input beams."""
    width_in: int
    layers: tuple[BeamLayer, ...]
    forwards: int = 0  # draft forwards it took

    def positions(self) -> tuple[np.ndarray, ...]:
        """Per layer [n_l]: each node's position in its root's tree (layer order, then index order)."""
        return tree_positions(self.layers, self.width_in)

    def trees(self) -> tuple[Tree, ...]:
        """One tree per input beam (empty where no node grows from it)."""
        columns = [([], [], [], []) for _ in range(self.width_in)]  # per root: tokens, parents, layers, nodes
        above = np.full(self.width_in, -1)  # tree position of each node of the layer above; input beams: -1
        for depth, (layer, pos) in enumerate(zip(self.layers, self.positions())):
            for i, (root, parent, token) in enumerate(zip(layer.roots, layer.parents, layer.tokens)):
                for column, value in zip(columns[root], (token, above[parent], depth, i)):
                    column.append(int(value))  # index order within a layer is tree order
            above = pos
        return tuple(Tree(*(np.array(c, dtype=np.int64) for c in cols)) for cols in columns)


def tree_positions(layers: Sequence[BeamLayer], width_in: int) -> tuple[np.ndarray, ...]:
    counts = np.zeros(width_in, dtype=np.int64)
    out = []
    for layer in layers:
        pos = np.empty(len(layer.tokens), dtype=np.int64)
        for i, root in enumerate(layer.roots):
            pos[i] = counts[root]
            counts[root] += 1
        out.append(pos)
    return tuple(out)

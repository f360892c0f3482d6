"""Tree maths on dependency trees over words, and their projection onto subwords.

A tree is given by ``heads`` in CoNLL-U convention (as in :class:`depnmt.parse.Sentence`):
``heads[i]`` is the head of word ``i + 1``, 1-based, 0 for the root. Node indices returned by
this module are 0-based; a root's parent is :data:`NO_PARENT`. Forests (several roots) are
accepted: every root has depth 0 and roots are not siblings of each other.

Pair matrices are ``[n, n]`` int64 tensors where entry ``(i, j)`` describes node ``j`` as seen
from node ``i`` (the row/column convention of Omote et al. 2019 Table 1).

**Subwords.** The papers define positions on words; with BPE a word is several subwords.
:func:`project_tree` gives the tree a scheme works on, by one of two rules:

* ``chain`` (Deguchi et al. 2019 §3.3, Fig. 4): a non-final subword's head is the next subword
  of the same word; the final subword takes the word's head, landing on the head word's
  ``last`` subword (the one that carries that word's own arc; default) or its ``first``.
* ``inherit``: every subword takes its word's node, so two subwords of one word are at relative
  depth 0 and in relation :data:`SELF`.

Without BPE (every subword is a word) both rules give the word tree itself.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Sequence

import torch
from torch import Tensor

from .bpe import word_index, word_spans

NO_PARENT = -1

# Relations between two nodes (the Japanese paper, Omote et al. 2019 NLP, §3.1).
NON_DEP, SELF, LINEAL, SIB = 0, 1, 2, 3   # LINEAL: one is an ancestor of the other

SUBWORD_RULES = ("chain", "inherit")
CHAIN_HEADS = ("last", "first")


# -- words ------------------------------------------------------------------------------------

def parents(heads: Sequence[int]) -> list[int]:
    """0-based parent of every node (:data:`NO_PARENT` for a root): the ``parse_head``."""
    return [h - 1 if h > 0 else NO_PARENT for h in heads]


def children(heads: Sequence[int]) -> list[list[int]]:
    """The children of every node, in word order."""
    kids: list[list[int]] = [[] for _ in heads]
    for node, parent in enumerate(parents(heads)):
        if parent != NO_PARENT:
            kids[parent].append(node)
    return kids


def root_paths(heads: Sequence[int]) -> list[list[int]]:
    """For every node, the nodes from its root down to itself (inclusive).

    Raises ValueError when some node never reaches a root (a cycle).
    """
    kids = children(heads)
    paths: list[list[int] | None] = [None] * len(heads)
    todo = [node for node, h in enumerate(heads) if h == 0]
    for root in todo:
        paths[root] = [root]
    while todo:
        node = todo.pop()
        for child in kids[node]:
            paths[child] = paths[node] + [child]
            todo.append(child)
    unreached = [node + 1 for node, p in enumerate(paths) if p is None]
    if unreached:
        raise ValueError(f"not a tree: words {unreached} do not reach a root")
    return paths  # type: ignore[return-value]


def depths(heads: Sequence[int]) -> list[int]:
    """``depth(n)``: the number of arcs from the root (roots have depth 0)."""
    return [len(path) - 1 for path in root_paths(heads)]


def ancestor_matrix(heads: Sequence[int]) -> Tensor:
    """``[n, n]`` bool: entry ``(i, j)`` is True when ``j`` is a proper ancestor of ``i``."""
    rows, cols = [], []
    for node, path in enumerate(root_paths(heads)):
        rows += [node] * (len(path) - 1)
        cols += path[:-1]
    out = torch.zeros(len(heads), len(heads), dtype=torch.bool)
    out[rows, cols] = True
    return out


def sibling_matrix(heads: Sequence[int]) -> Tensor:
    """``[n, n]`` bool: distinct nodes with the same parent (roots have none)."""
    parent = torch.tensor(parents(heads), dtype=torch.long)
    same = (parent[:, None] == parent[None, :]) & (parent[:, None] != NO_PARENT)
    return same & ~torch.eye(len(heads), dtype=torch.bool)


def relative_depth(heads: Sequence[int]) -> Tensor:
    """``dist_ij = depth(n_j) − depth(n_i)`` (Omote et al. 2019 Eq. 16), ``[n, n]`` int64."""
    depth = torch.tensor(depths(heads), dtype=torch.long)
    return depth[None, :] - depth[:, None]


def tree_distance(heads: Sequence[int]) -> Tensor:
    """The length of the path between nodes ``i`` and ``j`` (arcs, either direction),
    ``depth(i) + depth(j) − 2 · depth(lca(i, j))``: ``[n, n]`` int64, symmetric, 0 on the
    diagonal; −1 for two nodes of different trees of a forest (no path)."""
    n = len(heads)
    lineal = (ancestor_matrix(heads) | torch.eye(n, dtype=torch.bool)).to(torch.float64)
    common = (lineal @ lineal.t()).round().long()       # shared ancestors-or-self: depth(lca) + 1
    depth = torch.tensor(depths(heads), dtype=torch.long)
    dist = depth[:, None] + depth[None, :] - 2 * (common - 1)
    return torch.where(common > 0, dist, torch.full_like(dist, -1))


def pair_relations(heads: Sequence[int]) -> Tensor:
    """``[n, n]`` int64 relation of every pair: :data:`SELF` on the diagonal, :data:`LINEAL`
    for ancestor/descendant pairs, :data:`SIB` for siblings, :data:`NON_DEP` otherwise."""
    ancestor = ancestor_matrix(heads)
    out = torch.full((len(heads), len(heads)), NON_DEP, dtype=torch.long)
    out[ancestor | ancestor.t()] = LINEAL
    out[sibling_matrix(heads)] = SIB
    out[torch.eye(len(heads), dtype=torch.bool)] = SELF
    return out


def sentence_heads(heads: Sequence[int], sent_ids: Sequence[int] | None) -> list[int]:
    """Undo the parse stage's join of several sentences on one line: an arc whose head lies in
    another parser sentence (``sent_ids``, :class:`depnmt.parse.Sentence`) is cut, so every
    sentence's root is a root again (a forest). ``sent_ids=None`` means one sentence."""
    if sent_ids is None:
        return list(heads)
    return [0 if h and sent_ids[h - 1] != sent_ids[i] else h for i, h in enumerate(heads)]


def random_heads(n: int, rng: random.Random) -> list[int]:
    """A random tree over ``n`` words (for tests and benchmarks): the words are visited in a
    random order and each attaches to a random word visited before it."""
    order = rng.sample(range(n), n)
    heads = [0] * n
    for pos, node in enumerate(order[1:], start=1):
        heads[node] = order[rng.randrange(pos)] + 1
    return heads


# -- subwords ---------------------------------------------------------------------------------

@dataclass
class SubwordTree:
    """The tree a scheme sees for a subword sequence: ``heads`` over its nodes (CoNLL-U
    convention) and ``node[s]``, the node of subword ``s``."""

    heads: list[int]
    node: list[int]

    def expand(self, pairs: Tensor) -> Tensor:
        """Node-pair matrix ``[N, N]`` -> subword-pair matrix ``[S, S]``."""
        index = torch.tensor(self.node, dtype=torch.long)
        return pairs[index][:, index]


def chain_heads(heads: Sequence[int], spans: Sequence[tuple[int, int]],
                chain_head: str = "last") -> list[int]:
    """Subword-level heads (1-based, 0 = root) by the ``chain`` rule; ``spans[w]`` is the
    ``(start, end)`` subword range of word ``w``."""
    if chain_head not in CHAIN_HEADS:
        raise ValueError(f"chain_head must be one of {CHAIN_HEADS}, not {chain_head!r}")
    out: list[int] = []
    for (start, end), head in zip(spans, heads):
        out += range(start + 2, end + 1)                      # each piece -> the next piece
        if head == 0:
            out.append(0)
        else:
            h_start, h_end = spans[head - 1]
            out.append(h_end if chain_head == "last" else h_start + 1)
    return out


def project_tree(heads: Sequence[int], subwords: Sequence[str], rule: str = "chain",
                 chain_head: str = "last") -> SubwordTree:
    """The tree over ``subwords`` ("@@ " continuation markers) of the word tree ``heads``."""
    spans = word_spans(list(subwords))
    if len(spans) != len(heads):
        raise ValueError(f"{len(spans)} words in the subwords but {len(heads)} in the tree")
    if rule == "chain":
        return SubwordTree(chain_heads(heads, spans, chain_head), list(range(len(subwords))))
    if rule == "inherit":
        return SubwordTree(list(heads), word_index(list(subwords)))
    raise ValueError(f"subword tree rule must be one of {SUBWORD_RULES}, not {rule!r}")

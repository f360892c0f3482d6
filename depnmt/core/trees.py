"""Tree maths on dependency trees over words, trees decoded from arc scores (Chu–Liu/Edmonds),
and their projection onto subwords.

A tree is given by ``heads`` in CoNLL-U convention (as in :class:`depnmt.stages.parse.Sentence`):
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

import numpy as np
import torch
from torch import Tensor

from depnmt.core.conllu import Sentence, find_cycle
from depnmt.core.subwords import word_index, word_spans

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
    another parser sentence (``sent_ids``, :class:`depnmt.stages.parse.Sentence`) is cut, so every
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


def truncate_tree(tree: Sentence | None, n_words: int) -> Sentence | None:
    """The tree restricted to its first ``n_words`` words; arcs leaving the kept part are
    re-attached to the kept part's root (documented repair for truncated inputs)."""
    if tree is None or n_words >= len(tree.words):
        return tree
    heads = list(tree.heads[:n_words])
    root = next((i + 1 for i, h in enumerate(heads) if h == 0), None)
    if root is None:                       # the real root was cut off: promote the first word
        root = 1
        heads[0] = 0
    heads = [h if h <= n_words else root for h in heads]
    heads = [0 if i + 1 == root else (root if h == 0 else h) for i, h in enumerate(heads)]
    return Sentence(list(tree.words[:n_words]), heads, list(tree.deprels[:n_words]),
                    origin=tree.origin)


# -- trees from scores ------------------------------------------------------------------------

def max_spanning_tree(scores: np.ndarray) -> list[int]:
    """Chu–Liu/Edmonds maximum spanning arborescence with exactly one root arc.

    ``scores[d, h]`` (``[n + 1, n + 1]``, finite off the diagonal) scores the arc h → d; node 0
    is the root (row 0 and the diagonal are ignored). Returns CoNLL-U heads of nodes 1..n. One
    root arc is enforced by subtracting from every root arc a constant larger than the score
    range of any tree (so a single-rooted tree always wins, and among those the best one).
    """
    s = np.array(scores, dtype=np.float64)
    n = s.shape[0] - 1
    if n <= 0:
        return []
    arcs = s[1:][~np.eye(n + 1, dtype=bool)[1:]]
    s[1:, 0] -= 1.0 + n * (arcs.max() - arcs.min())
    return [int(h) for h in _chu_liu_edmonds(s)[1:]]


def _chu_liu_edmonds(s: np.ndarray) -> np.ndarray:
    """Heads ``[n + 1]`` (entry 0 unused) of the best arborescence rooted at node 0."""
    s = s.copy()
    np.fill_diagonal(s, -np.inf)
    s[0] = -np.inf
    heads = s.argmax(axis=1)
    cycle = [d + 1 for d in find_cycle([int(h) for h in heads[1:]])]
    if not cycle:
        return heads
    cyc = np.array(cycle)
    rest = np.array([i for i in range(len(s)) if i not in set(cycle)])     # node 0 first
    gain = s[np.ix_(cyc, rest)] - s[cyc, heads[cyc]][:, None]            # enter the cycle at v
    leave = s[np.ix_(rest, cyc)]                                         # leave it from u
    c = len(rest)
    sub = np.full((c + 1, c + 1), -np.inf)
    sub[:c, :c] = s[np.ix_(rest, rest)]
    sub[:c, c] = leave.max(axis=1)
    sub[c, :c] = gain.max(axis=0)
    sub_heads = _chu_liu_edmonds(sub)
    out = heads.copy()
    for i, d in enumerate(rest[1:], start=1):
        h = sub_heads[i]
        out[d] = cyc[leave[i].argmax()] if h == c else rest[h]
    h = sub_heads[c]
    out[cyc[gain[:, h].argmax()]] = rest[h]
    return out


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

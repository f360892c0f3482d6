"""The words of many dependency trees as flat arrays: what the learn step counts.

Schemes that learn a vocabulary from the training trees (GPS's labels, the factors' labels
and tags: :meth:`~depnmt.model.schemes.Scheme.learn_options`) count over every word of the
corpus. Walking millions of tree objects in Python takes minutes; counting over arrays takes
seconds. A corpus hands the learn step its source trees as a sequence of
:class:`WordTable` pieces — the training cache reads them piece by piece from its arrays
(:meth:`depnmt.data.cache.TrainCorpus.source_tables`), trees in memory make one
(:meth:`WordTable.from_trees`) — and a scheme adds up its counts over the pieces, so the
memory the step needs does not grow with the corpus.

Per word ``w`` of the ``T`` trees (``W`` words in all; trees without words are skipped):
``heads[w]`` the head in CoNLL-U convention (1-based within its tree, 0 for a root),
``rel[w]`` an index into ``rels``, ``upos[w]`` into ``tags`` (-1 where the tree has no UPOS),
``sent[w]`` the parser sentence (-1 where the tree records none), ``tree[w]`` the tree's
first word (so ``tree[w] + heads[w] - 1`` is the head's index in the arrays).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np


@dataclass
class WordTable:
    heads: np.ndarray           # [W] int
    rel: np.ndarray             # [W] int, into rels
    upos: np.ndarray            # [W] int, into tags, -1: none
    sent: np.ndarray            # [W] int, -1: none
    tree: np.ndarray            # [W] int, the first word of the word's tree
    rels: list[str]
    tags: list[str]

    @classmethod
    def from_trees(cls, trees: Iterable[Any]) -> "WordTable":
        """The table of ``trees`` (:class:`depnmt.stages.parse.Sentence`; None and empty
        skipped)."""
        rels: dict[str, int] = {}
        tags: dict[str, int] = {}
        heads, rel, upos, sent, first = [], [], [], [], []
        for t in trees:
            if t is None or not len(t):
                continue
            n = len(t.heads)
            first += [len(heads)] * n
            heads += t.heads
            rel += [rels.setdefault(r, len(rels)) for r in t.deprels]
            upos += [tags.setdefault(u, len(tags)) for u in t.upos] if t.upos else [-1] * n
            sent += t.sent_ids or [-1] * n
        return cls(*(np.array(v, np.int64) for v in (heads, rel, upos, sent, first)),
                   list(rels), list(tags))

    def forest_heads(self) -> np.ndarray:
        """``heads`` with the arcs between parser sentences cut (their heads 0):
        :func:`depnmt.core.trees.sentence_heads` of every tree."""
        head_at = np.maximum(self.tree + self.heads - 1, 0)
        crosses = (self.heads > 0) & (self.sent >= 0) & (self.sent[head_at] != self.sent)
        return np.where(crosses, 0, self.heads)


def counts_by_name(ids: np.ndarray, names: list[str]) -> Counter:
    """How often each name occurs among ``ids`` (indices into ``names``, which may repeat a
    name; negatives skipped)."""
    counts: Counter = Counter()
    for name, c in zip(names, np.bincount(ids[ids >= 0], minlength=len(names)).tolist()):
        if c:
            counts[name] += c
    return counts

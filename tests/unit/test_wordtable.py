"""The word table's array computations equal the per-tree definitions they replace."""

from __future__ import annotations

import random

import numpy as np

from depnmt.core.trees import random_heads, sentence_heads
from depnmt.core.wordtable import WordTable, counts_by_name
from depnmt.stages.parse import Sentence


def random_trees(n: int, seed: int = 2) -> list[Sentence | None]:
    rng = random.Random(seed)
    trees: list[Sentence | None] = [None, Sentence.empty()]
    for _ in range(n):
        k = rng.randint(1, 12)
        heads = random_heads(k, rng)
        sent = sorted(rng.randint(0, 2) for _ in range(k)) if rng.random() < 0.5 else None
        upos = [rng.choice("NVD") for _ in range(k)] if rng.random() < 0.5 else None
        trees.append(Sentence([f"w{i}" for i in range(k)], heads,
                              [rng.choice(["a", "b", "root"]) for _ in range(k)], upos, sent))
    return trees


def test_forest_heads_are_those_of_each_tree():
    trees = random_trees(300)
    table = WordTable.from_trees(trees)
    real = [t for t in trees if t is not None and len(t)]
    assert table.forest_heads().tolist() == [h for t in real
                                             for h in sentence_heads(t.heads, t.sent_ids)]
    assert counts_by_name(np.array([0, 1, 1, -1, 2]), ["x", "y", "x"]) == {"x": 2, "y": 2}

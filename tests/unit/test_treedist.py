"""``treedist`` (tree distance, depnmt/model/schemes/treedist.py): the path lengths of a worked
example, the labels, and the fast attention against the literal equations."""

from __future__ import annotations

import random

import pytest
import torch

from depnmt.core.trees import project_tree, tree_distance
from depnmt.data.batches import Example
from depnmt.model.schemes.names import resolve
from depnmt.model.schemes.treedist import treedist_labels
from tests.unit.test_relative import (ancestors, batch_of, literal_attention, lookup,
                                      random_example, tiny)

# "My father bought a red car ." (Omote et al. 2019 Table 1's sentence): bought is the root;
# My -> father -> bought <- car <- a, red; . -> bought
HEADS = [2, 3, 0, 6, 6, 3, 3]
DISTANCES = [[0, 1, 2, 4, 4, 3, 3],     # My
             [1, 0, 1, 3, 3, 2, 2],     # father
             [2, 1, 0, 2, 2, 1, 1],     # bought
             [4, 3, 2, 0, 2, 1, 3],     # a
             [4, 3, 2, 2, 0, 1, 3],     # red
             [3, 2, 1, 1, 1, 0, 2],     # car
             [3, 2, 1, 3, 3, 2, 0]]     # .


def test_path_lengths_of_a_worked_example():
    assert tree_distance(HEADS).tolist() == DISTANCES


def test_nodes_of_different_trees_have_no_path():
    assert tree_distance([0, 1, 0]).tolist() == [[0, 1, -1], [1, 0, -1], [-1, -1, 0]]


def test_labels_clip_and_keep_zero_for_no_term():
    labels = treedist_labels(HEADS, 2)
    assert labels.tolist() == [[min(d, 2) + 1 for d in row] for row in DISTANCES]
    assert treedist_labels([0, 0], 3).tolist() == [[1, 0], [0, 1]]


def literal_distance(heads: list[int], i: int, j: int) -> int:
    """The path between i and j: the nodes on one root path but not on the other."""
    a, b = {i, *ancestors(heads, i)}, {j, *ancestors(heads, j)}
    return len(a ^ b)


def literal_rows(view, t: int, k: int) -> torch.Tensor:
    n = len(view.node)
    return torch.tensor([[min(literal_distance(view.heads, view.node[i], view.node[j]), k) + 1
                          if i < n and j < n else 0 for j in range(t)] for i in range(t)])


@pytest.mark.parametrize("rule", ["chain", "inherit"])
@pytest.mark.parametrize("spec", ["treedist", "Transformer_treedist"])
def test_fast_path_equals_literal_equations(spec, rule):
    k = 2
    model = tiny(spec, treedist_k=k, subword_tree=rule)
    assert [s.name for s in model.schemes.schemes] == resolve(spec)
    rng = random.Random(3)
    examples = [random_example(i, n, rng, bpe=True) for i, n in enumerate([7, 3, 5])]
    batch = batch_of(model, examples)
    views = [project_tree(e.src_tree.heads, e.src_subwords, rule) for e in examples]
    s = batch.src.shape[1]
    rows = torch.stack([literal_rows(v, s, k) for v in views])          # (B, S, S)
    tables = model.schemes.parts[-1].tables
    d_k = model.cfg.d_model // model.cfg.n_heads
    mask = (batch.src != 0)[:, None, None, :]
    with torch.no_grad():
        fast, _ = model.encode(batch.src, batch.src_feats)
        x = model.schemes.embed(model.src_embed(batch.src) * model.scale, "src",
                                torch.arange(s), {})
        for i, layer in enumerate(model.encoder):
            a_k, a_v = lookup(tables.key, i, rows, d_k), lookup(tables.value, i, rows, d_k)
            x = layer.norm1(x + literal_attention(layer.self_attn, x, mask, a_k, a_v))
            x = layer.norm2(x + layer.ffn(x))
    keep = batch.src != 0
    assert torch.allclose(fast[keep], x[keep], atol=1e-5)


def test_without_a_tree_is_a_user_error():
    from depnmt.core.errors import DepnmtError
    model = tiny("treedist")
    with pytest.raises(DepnmtError, match="needs source trees"):
        batch_of(model, [Example(0, [5, 6, 3], [7], ["a", "b"], None)])

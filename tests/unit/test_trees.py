"""Tree maths on words and the chain / inherit projections onto subwords."""

from __future__ import annotations

import random

import pytest
import torch

from depnmt.core.trees import (LINEAL, NO_PARENT, NON_DEP, SELF, SIB, ancestor_matrix, chain_heads,
                               children, depths, pair_relations, parents, project_tree,
                               random_heads, relative_depth, root_paths, sibling_matrix)

# "My father bought a red car ." (Omote et al. 2019, Fig. 2)
HEADS = [2, 3, 0, 6, 6, 3, 3]


def random_tree(n: int, seed: int) -> list[int]:
    return random_heads(n, random.Random(seed))


def test_basic_maths_on_the_paper_sentence():
    assert parents(HEADS) == [1, 2, NO_PARENT, 5, 5, 2, 2]
    assert children(HEADS)[2] == [1, 5, 6]
    assert depths(HEADS) == [2, 1, 0, 2, 2, 1, 1]
    assert root_paths(HEADS)[3] == [2, 5, 3]                 # bought -> car -> a
    assert ancestor_matrix(HEADS)[0].nonzero().flatten().tolist() == [1, 2]
    assert sibling_matrix(HEADS)[1].nonzero().flatten().tolist() == [5, 6]
    assert relative_depth(HEADS)[0, 2] == -2                   # dist_{My, bought}, Eq. 16


@pytest.mark.parametrize("seed", range(5))
def test_relations_agree_with_their_definitions_on_random_trees(seed):
    heads = random_tree(12, seed)
    paths, depth = root_paths(heads), depths(heads)
    rel = pair_relations(heads)
    for i in range(12):
        assert paths[i][-1] == i and len(paths[i]) == depth[i] + 1
        for j in range(12):
            lineal = j in paths[i][:-1] or i in paths[j][:-1]
            sib = i != j and heads[i] == heads[j]
            expected = SELF if i == j else LINEAL if lineal else SIB if sib else NON_DEP
            assert rel[i, j] == expected
    assert torch.equal(relative_depth(heads), -relative_depth(heads).t())


def test_forest_roots_are_not_siblings_and_cycles_are_rejected():
    forest = [0, 1, 0]
    assert depths(forest) == [0, 1, 0]
    assert not sibling_matrix(forest)[0, 2]
    with pytest.raises(ValueError, match="do not reach a root"):
        depths([2, 1, 0])


def test_chain_rule_of_deguchi_fig4():
    """"Fing@@ er@@ print" whose word's head is "input": Fing -> er -> print -> input."""
    subwords = ["Fing@@", "er@@", "print", "input"]
    tree = project_tree([2, 0], subwords, "chain")
    assert tree.heads == [2, 3, 4, 0]
    assert tree.node == [0, 1, 2, 3]


@pytest.mark.parametrize("chain_head,expected", [("last", [4, 3, 4, 0]), ("first", [2, 3, 4, 0])])
def test_chain_arc_lands_on_the_chosen_piece_of_the_head_word(chain_head, expected):
    assert chain_heads([2, 0], [(0, 1), (1, 4)], chain_head) == expected


def test_inherit_rule_puts_pieces_of_a_word_on_one_node():
    subwords = ["the", "Fing@@", "er@@", "print"]
    tree = project_tree([2, 0], subwords, "inherit")
    assert tree.node == [0, 1, 1, 1]
    dist = tree.expand(relative_depth(tree.heads))
    rel = tree.expand(pair_relations(tree.heads))
    assert dist[1:, 1:].eq(0).all() and rel[1:, 1:].eq(SELF).all()
    assert dist[0].tolist() == [0, -1, -1, -1]


@pytest.mark.parametrize("rule", ["chain", "inherit"])
def test_word_level_input_uses_the_word_tree(rule):
    heads = random_tree(9, 3)
    tree = project_tree(heads, [f"w{i}" for i in range(9)], rule)
    assert tree.heads == heads
    assert torch.equal(tree.expand(relative_depth(tree.heads)), relative_depth(heads))


def test_word_count_mismatch_and_unknown_rule_are_errors():
    with pytest.raises(ValueError, match="words"):
        project_tree([0, 1], ["a@@", "b"], "chain")
    with pytest.raises(ValueError, match="rule"):
        project_tree([0], ["a"], "bogus")

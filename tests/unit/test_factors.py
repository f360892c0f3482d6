"""Source factors (Sennrich & Haddow 2016): the feature values of a worked example, their ids,
and the embedding combination written out literally."""

from __future__ import annotations

import click
import pytest
import torch

from depnmt.core.errors import DepnmtError
from depnmt.core.vocab import EOS
from depnmt.core.wordtable import WordTable
from depnmt.data.batches import Example
from depnmt.model.schemes.base import ModelDims
from depnmt.model.schemes.factors import (EOS_ID, SPECIALS, UNK_ID, FactorModule, Factors,
                                          check_factor_list, subword_values)
from depnmt.stages.parse import Sentence

# "The cat sleeps ." with "sleeps" split by BPE: The <- cat <- sleeps (root) -> .
TREE = Sentence(["The", "cat", "sleeps", "."], [2, 3, 0, 3], ["det", "nsubj", "root", "punct"],
                ["DET", "NOUN", "VERB", "PUNCT"])
PIECES = ["The", "cat", "sle@@", "e@@", "ps", "."]


def test_every_piece_carries_its_words_features_and_the_subword_tags():
    values = subword_values(TREE, PIECES)
    assert values["label"] == ["det", "nsubj", "root", "root", "root", "punct"]
    assert values["pos"] == ["DET", "NOUN", "VERB", "VERB", "VERB", "PUNCT"]
    # head of The is cat (to its right), of cat is sleeps (right), of . is sleeps (left)
    assert values["dir"] == ["right", "right", "root", "root", "root", "left"]
    assert values["subword"] == ["O", "O", "B", "I", "E", "O"]
    with pytest.raises(ValueError, match="5 words in the subwords but 4"):
        subword_values(TREE, PIECES + ["extra"])


def test_ids_use_the_learned_vocabulary_unk_and_eos():
    scheme = Factors(factors="label,dir,subword",
                     factor_vocab={"label": ["nsubj", "det", "root"], "pos": ["NOUN"]})
    ex = Example(0, [5, 6, 7, 8, 9, 10, EOS], [], PIECES, src_tree=TREE)
    feats = scheme.source_features(ex)
    n = len(SPECIALS)
    assert feats["factor_label"].tolist() == [n + 1, n, n + 2, n + 2, n + 2, UNK_ID, EOS_ID]
    assert feats["factor_dir"].tolist() == [n + 2, n + 2, n, n, n, n + 1, EOS_ID]
    assert feats["factor_subword"].tolist() == [n + 3, n + 3, n, n + 1, n + 2, n + 3, EOS_ID]
    assert set(feats) == {"factor_label", "factor_dir", "factor_subword"}


def test_learned_vocabulary_is_most_frequent_first():
    learned = Factors().learn_options([WordTable.from_trees([TREE, TREE])])
    assert learned["factor_vocab"]["label"] == ["det", "nsubj", "punct", "root"]     # ties: a–z
    assert Factors(factor_vocab={"label": ["x"], "pos": ["y"]}).learn_options([]) == {}
    upos = Factors().learn_options([WordTable.from_trees([TREE, Sentence(["a"], [0], ["root"])])])
    assert upos["factor_vocab"]["pos"][-1] == "_"           # a tree without UPOS counts "_"


def test_sum_and_concat_are_the_literal_combinations():
    dims = ModelDims(d_model=8, n_heads=2, encoder_layers=1, decoder_layers=1)
    feats = {"factor_label": torch.tensor([[3, 4, 2]]), "factor_dir": torch.tensor([[5, 3, 0]])}
    x = torch.randn(1, 3, 8)
    summed = FactorModule(dims, {"label": 6, "dir": 6}, "sum", 0)
    expected = x + summed.tables["label"].weight[feats["factor_label"]] \
        + summed.tables["dir"].weight[feats["factor_dir"]]
    assert torch.allclose(summed.embed(x, "src", torch.arange(3), feats), expected)
    assert torch.equal(summed.embed(x, "tgt", torch.arange(3), feats), x)   # source side only
    assert (summed.tables["dir"].weight[0] == 0).all()                       # padding: zero
    cat = FactorModule(dims, {"label": 6, "dir": 6}, "concat", 2)
    out = cat.embed(x, "src", torch.arange(3), feats)
    assert out.shape == x.shape
    assert torch.equal(out[..., :4], x[..., :4])
    assert torch.equal(out[..., 4:6], cat.tables["label"].weight[feats["factor_label"]])
    assert torch.equal(out[..., 6:], cat.tables["dir"].weight[feats["factor_dir"]])


def test_bad_options_are_clear():
    with pytest.raises(ValueError, match="expected some of"):
        check_factor_list("label,shape")
    with pytest.raises(ValueError):
        check_factor_list("label,label")
    scheme = Factors(factor_combine="concat", factor_dim=4, factors="label,pos",
                     factor_vocab={"label": [], "pos": []})
    with pytest.raises(DepnmtError, match="leaves no room"):
        scheme.check(ModelDims(d_model=8, n_heads=2, encoder_layers=1, decoder_layers=1))

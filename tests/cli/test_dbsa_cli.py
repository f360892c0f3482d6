"""DBSA end to end: training on source and target trees (dev UAS logged), translation with no
parser at all, induced source trees as valid CoNLL-U, and clear errors."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from depnmt.stages.parse import read_conllu

from .conftest import TINY_MODEL, import_random_trees, run_cli

DBSA = ["--scheme", "abs+dbsa-enc+dbsa-dec", "--dbsa-enc-layer", "1",
        "--dbsa-dec-layer", "1"]


@pytest.fixture(scope="module")
def tiny_trees(tiny_bpe, tmp_path_factory) -> Path:
    """Random trees over both sides' tokens, imported with the conllu backend."""
    return import_random_trees(tiny_bpe, tmp_path_factory.mktemp("given"), "parse-dbsa",
                               ("en", "de"), ["dep"], seed=0)


@pytest.fixture(scope="module")
def dbsa_model(tiny_bpe, tiny_trees, tmp_path_factory) -> Path:
    model = tmp_path_factory.mktemp("dbsa") / "m"
    assert run_cli(["train", "-i", tiny_bpe, "--trees", tiny_trees, "-o", model, *TINY_MODEL,
                    *DBSA, "--max-steps", "4", "--valid-every", "2"]) == 0
    return model


def test_training_logs_parse_losses_and_dev_uas(dbsa_model):
    records = [json.loads(l) for l in (dbsa_model / "metrics.jsonl").read_text().splitlines()]
    valid = [r for r in records if r["event"] == "valid"]
    assert len(valid) == 2
    for r in valid:
        assert {"dev_uas_enc", "dev_uas_dec", "dev_uas_dec_visible", "dev_bleu"} <= r.keys()
        assert 0 <= r["dev_uas_enc"] <= 100
    train = [r for r in records if r["event"] == "train"]
    assert train and {"parse_enc", "parse_dec"} <= train[0].keys()
    config = json.loads((dbsa_model / "config.json").read_text())
    assert config["parser"]["src"] is None                     # translate runs no parser
    assert set(config["parser"]["training"]) == {"src", "tgt"}


def test_dbsa_model_translates_without_any_parser(dbsa_model, tiny_bpe, tmp_path, monkeypatch,
                                                  capsys):
    import depnmt.stages.parse

    def no_parser(settings):
        raise AssertionError("a DBSA-only model must not load a parser")

    monkeypatch.setattr(depnmt.stages.parse, "make_parser", no_parser)
    for name in ("spacy", "stanza"):                            # as if not installed
        monkeypatch.setitem(sys.modules, name, None)
    lines = (tiny_bpe.parent / "prepare" / "test.raw.en").read_text().splitlines()[:6]
    lines.insert(2, "")
    src = tmp_path / "in.txt"
    src.write_text("\n".join(lines) + "\n")
    trees = tmp_path / "induced.conllu"
    assert run_cli(["translate", "-m", dbsa_model, "-i", src, "--beam", "2",
                    "--induced-trees", trees]) == 0
    out = capsys.readouterr().out.split("\n")
    assert len(out) - 1 == 7 and out[2] == ""
    induced = list(read_conllu(trees))                         # valid trees (no cycles)
    tokens = (tiny_bpe.parent / "prepare" / "test.en").read_text().splitlines()[:6]
    tokens.insert(2, "")
    assert [t.words for t in induced] == [line.split() for line in tokens]


def test_induced_trees_need_an_encoder_parse_head(tiny_model, tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_text("A dog runs.\n")
    assert run_cli(["translate", "-m", tiny_model, "-i", src, "--induced-trees",
                    tmp_path / "t.conllu"]) == 2
    assert "no encoder parse head" in capsys.readouterr().err


def test_dbsa_errors_are_clear(tiny_bpe, tiny_trees, tmp_path, capsys):
    base = ["train", "-i", tiny_bpe, *TINY_MODEL, "--max-steps", "1"]
    assert run_cli([*base, "-o", tmp_path / "a", "--scheme", "abs+dbsa-enc",
                    "--trees", tiny_trees]) == 2
    assert "--dbsa-enc-layer 4: the encoder has 1 layer (choose 1..1)" in capsys.readouterr().err
    assert run_cli([*base, "-o", tmp_path / "b", "--scheme", "abs+dbsa-dec",
                    "--dbsa-dec-layer", "1"]) == 2
    assert "needs target trees: pass --trees" in capsys.readouterr().err


def test_gold_arcs_replace_the_parse_heads_distribution(dbsa_model, tiny_trees, tiny_model,
                                                        tmp_path, capsys):
    """translate --dbsa-gold-arcs (the DBSA plugin's gold_dependency): the parse head's weights
    are one-hot on each source position's gold head (rows without one: zeros), so its output is
    the gold head's value vector; the trees come from CoNLL-U input."""
    import torch

    from depnmt.core.conllu import read_conllu_input
    from depnmt.data.batches import collate
    from depnmt.decoding.translate import Translator
    from depnmt.model.schemes.dbsa import DBSAModule
    conllu = tiny_trees / "test.en.conllu"
    trees = read_conllu_input(conllu)[:4]
    tr = Translator.from_model_dir(dbsa_model, device="cpu", precision="fp32")
    batch = collate(tr.examples([list(t.words) for t in trees], trees))
    gold = batch.src_feats["dbsa_src_head"]
    module = next(p for p in tr.model.schemes.parts if isinstance(p, DBSAModule) and p.side == "src")
    x = torch.randn(*batch.src.shape, tr.model.cfg.d_model)
    pos = torch.arange(batch.src.shape[1])
    predicted = module.attention_terms("src", module.layer, batch.src_feats, pos, pos)
    with torch.no_grad():
        own = predicted.head_overrides[0].compute(x, x, None, None)
        tr.use_gold_arcs()
        gold_terms = module.attention_terms("src", module.layer, batch.src_feats, pos, pos)
        forced = gold_terms.head_overrides[0].compute(x, x, None, None)
    one_hot = torch.zeros(*gold.shape, gold.shape[1])
    for b, i in zip(*torch.nonzero(gold > 0, as_tuple=True)):
        one_hot[b, i, gold[b, i] - 1] = 1.0
    assert (gold > 0).any() and (gold == 0).any()                 # EOS/padding: no gold head
    (b, t), d_k = gold.shape, own.kv.v.shape[-1]
    assert forced.out.shape == own.out.shape == (b, 1, t, d_k)  # [B, 1 head, Tq, d_k]
    assert torch.allclose(forced.out[:, 0], one_hot @ own.kv.v)
    assert not torch.allclose(forced.out, own.out)
    assert torch.equal(forced.scores, own.scores)                 # A_parse is still reported
    # the CLI: conllu input works, text input and a model without DBSA(Enc) are clear errors
    capsys.readouterr()
    assert run_cli(["translate", "-m", dbsa_model, "--input-format", "conllu", "-i", conllu,
                    "--dbsa-gold-arcs", "--beam", "1"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == len(read_conllu_input(conllu))
    text = tmp_path / "in.txt"
    text.write_text("a dog .\n")
    assert run_cli(["translate", "-m", dbsa_model, "-i", text, "--dbsa-gold-arcs"]) == 2
    assert "--input-format conllu" in capsys.readouterr().err
    assert run_cli(["translate", "-m", tiny_model, "--input-format", "conllu", "-i", conllu,
                    "--dbsa-gold-arcs"]) == 2
    assert "source parse head" in capsys.readouterr().err


def test_induced_target_trees_of_the_hypotheses(dbsa_model, tiny_model, tiny_bpe, tmp_path,
                                                capsys):
    """--induced-target-trees: one valid tree per input line over the words of its translation
    (empty lines: empty trees), from the decoder's parse head; the trees equal the maximum
    spanning trees of a teacher-forced pass over [BOS] + hypothesis done by hand."""
    import torch

    from depnmt.core.subwords import merge_subwords
    from depnmt.core.vocab import BOS, EOS
    from depnmt.data.batches import collate, pad_2d
    from depnmt.decoding.search import search
    from depnmt.decoding.translate import Translator
    from depnmt.model.schemes.dbsa import induced_tree
    lines = (tiny_bpe.parent / "prepare" / "test.raw.en").read_text().splitlines()[:5]
    lines.insert(1, "")
    src = tmp_path / "in.txt"
    src.write_text("\n".join(lines) + "\n")
    out_trees = tmp_path / "tgt.conllu"
    capsys.readouterr()
    assert run_cli(["translate", "-m", dbsa_model, "-i", src, "--beam", "1", "--precision",
                    "fp32", "--induced-target-trees", out_trees]) == 0
    hyps = capsys.readouterr().out.splitlines()
    trees = list(read_conllu(out_trees))
    assert len(trees) == len(lines) == len(hyps) and not trees[1].words
    tr = Translator.from_model_dir(dbsa_model, device="cpu", precision="fp32", beam=1)
    words = [tr.src_tokenizer.tokenize(line) for line in lines if line]
    batch = collate(tr.examples(words))
    with torch.no_grad():
        ids = [[t for t in h if t != EOS] for h in search(tr.model, batch.src, batch.src_feats,
                                                          tr.search_cfg)]
        _, extras = tr.model(batch.src, pad_2d([[BOS] + h for h in ids]), batch.src_feats)
    expected = [induced_tree(extras.scores["parse_dec"][i, 1:, 1:], tr.tgt_vocab.decode(h))
                for i, h in enumerate(ids)]
    got = [t for t, line in zip(trees, lines) if line]
    for tree, want, h in zip(got, expected, ids):
        assert list(tree.words) == merge_subwords(tr.tgt_vocab.decode(h))
        assert list(tree.heads) == list(want.heads)
    capsys.readouterr()
    assert run_cli(["translate", "-m", tiny_model, "-i", src, "--induced-target-trees",
                    tmp_path / "none.conllu"]) == 2
    assert "decoder parse head" in capsys.readouterr().err


def test_the_teacher_forced_pass_runs_inside_search_attention(dbsa_model, tiny_bpe, tmp_path,
                                                              monkeypatch):
    """--induced-target-trees' pass over the hypotheses, like the search, leaves out cuDNN's
    attention on a GPU (a new execution plan for every new shape)."""
    import contextlib

    import depnmt.decoding.translate
    inside, forwards = [], []

    @contextlib.contextmanager
    def recorder(device):
        inside.append(device)
        yield
        inside.pop()

    model_cls = depnmt.decoding.translate.TransformerNMT
    real = model_cls.forward

    def spy(self, *args, **kwargs):
        forwards.append(bool(inside))
        return real(self, *args, **kwargs)
    monkeypatch.setattr(depnmt.decoding.translate, "search_attention", recorder)
    monkeypatch.setattr(model_cls, "forward", spy)
    src = tmp_path / "in.txt"
    src.write_text("A man rides a bike.\nTwo dogs play.\n")
    assert run_cli(["translate", "-m", dbsa_model, "-i", src, "--induced-target-trees",
                    tmp_path / "t.conllu"]) == 0
    assert forwards and all(forwards), forwards

"""Ensembles (``translate -m A -m B``, ``Translator.load([A, B])``,
:mod:`depnmt.decoding.ensemble`):
the averaged distribution, outputs against each model alone, each member's own trees, and the
models that cannot join."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from depnmt.decoding.ensemble import EnsembleTranslator
from depnmt.decoding.translate import Translator

from .conftest import TINY_MODEL, other_segmentation, run_cli


def translate(tmp_path: Path, tiny_bpe: Path, *args) -> list[str]:
    out = tmp_path / "out.txt"
    src = tiny_bpe.parent / "prepare" / "test.raw.en"
    assert run_cli(["translate", *args, "-i", src, "-o", out]) == 0
    return out.read_text(encoding="utf-8").splitlines()


def test_two_seeds_translate_otherwise_than_each_alone(seeds, tiny_bpe, tmp_path):
    a, b = seeds
    alone_a = translate(tmp_path, tiny_bpe, "-m", a)
    alone_b = translate(tmp_path, tiny_bpe, "-m", b)
    both = translate(tmp_path, tiny_bpe, "-m", a, "-m", b)
    assert len(both) == len(alone_a) == 30
    assert both != alone_a and both != alone_b
    # a model with itself is the model: the mean of equal distributions is that distribution
    assert translate(tmp_path, tiny_bpe, "-m", a, "-m", a) == alone_a
    nbest_a = translate(tmp_path, tiny_bpe, "-m", a, "--nbest", "2")
    nbest_aa = translate(tmp_path, tiny_bpe, "-m", a, "-m", a, "--nbest", "2")
    assert len(nbest_aa) == 60
    for x, y in zip(nbest_a, nbest_aa):
        (i, text, score, logprob), (j, text2, score2, logprob2) = x.split(" ||| "), y.split(" ||| ")
        assert (i, text) == (j, text2)
        assert abs(float(score) - float(score2)) < 2e-4 and abs(float(logprob) - float(logprob2)) < 2e-4
    # the API gives the command's output
    import depnmt
    sources = (tiny_bpe.parent / "prepare" / "test.raw.en").read_text(encoding="utf-8").splitlines()
    assert depnmt.Translator.load([a, b], device="cpu").translate(sources) == both


def test_each_step_is_the_mean_of_the_members_log_probabilities(seeds, tiny_bpe):
    members = [Translator.from_model_dir(m, device="cpu", precision="fp32") for m in seeds]
    ensemble = EnsembleTranslator(members, [str(m) for m in seeds])
    words = [["A", "man", "is", "riding", "a", "bike", "."], ["Two", "dogs", "."]]
    batch = ensemble.collate(ensemble.examples(words))
    assert isinstance(batch.src_feats, list) and len(batch.src_feats) == 2
    state = ensemble.model.search_state(batch.src, batch.src_feats)
    tokens = torch.full((2, 1), 2, dtype=torch.long)            # BOS
    mixed = ensemble.model.decode(tokens, state, incremental=True)
    alone = []
    for member in members:
        one = member.collate(member.examples(words))
        logits = member.model.decode(tokens, member.model.search_state(one.src, one.src_feats),
                                     incremental=True)
        alone.append(torch.log_softmax(logits.float(), -1))
    torch.testing.assert_close(mixed, (alone[0] + alone[1]) / 2)


def test_members_keep_their_own_schemes_and_trees(seeds, tiny_bpe, tmp_path, capsys):
    """abs, abs+dep+rel on spaCy's trees and abs+dep+rel on control trees: the input is parsed
    once, and each member reads its own trees (the control applied for the control model)."""
    from depnmt.stages.parse import read_conllu
    prepare = tiny_bpe.parent / "prepare"
    parse = tmp_path / "parse"
    assert run_cli(["parse", "-i", prepare, "-o", parse, "--side", "src",
                    "--backend", "spacy"]) == 0
    ctl = tmp_path / "ctl"
    assert run_cli(["controls", "-i", parse, "-o", ctl, "--kind", "left-branching",
                    "--labels", "constant"]) == 0
    models = [seeds[0]]
    for name, trees in (("real", parse), ("ctl", ctl)):
        models.append(tmp_path / f"model-{name}")
        assert run_cli(["train", "-i", tiny_bpe, "-t", trees, "-o", models[-1], *TINY_MODEL,
                        "--scheme", "abs+dep+rel", "--max-steps", "3"]) == 0
    ensemble = EnsembleTranslator.from_model_dirs(models, [None] * 3, device="cpu")
    given = [t for t in read_conllu(parse / "test.en.conllu") if t.words]
    examples = ensemble.examples([list(t.words) for t in given])
    assert [ex.members[1].src_tree for ex in examples] == given
    wanted = [t for t in read_conllu(ctl / "test.en.conllu") if t.words]
    assert [ex.members[2].src_tree for ex in examples] == wanted
    differ = [ex.members[2].src_tree.heads != ex.members[1].src_tree.heads for ex in examples]
    assert sum(differ) > 0.8 * len(examples)
    assert examples[0].members[1].feats and examples[0].members[2].feats
    assert not examples[0].members[0].feats                  # abs reads no tree features
    args = [x for m in models for x in ("-m", m)]
    out = translate(tmp_path, tiny_bpe, *args)
    assert len(out) == 30
    capsys.readouterr()
    assert run_cli(["translate", *args, "--induced-trees", tmp_path / "t.conllu",
                    "-i", prepare / "test.raw.en"]) == 2
    assert "an ensemble induces no trees" in capsys.readouterr().err


def test_models_that_cannot_join(seeds, tiny_bpe, tmp_path, capsys):
    other = other_segmentation(tiny_bpe, tmp_path / "bpe-other")
    stranger = tmp_path / "stranger"
    assert run_cli(["train", "-i", other, "-o", stranger, *TINY_MODEL, "--max-steps", "2"]) == 0
    capsys.readouterr()
    src = tiny_bpe.parent / "prepare" / "test.raw.en"
    assert run_cli(["translate", "-m", seeds[0], "-m", stranger, "-i", src]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {stranger}: its ") and "differs from" in err
    assert "Traceback" not in err
    assert run_cli(["translate", "-m", seeds[0], "-m", seeds[1], "--ct2", tmp_path,
                    "-i", src]) == 2
    assert "--ct2 translates with one export" in capsys.readouterr().err
    assert run_cli(["translate", "-m", seeds[0], "-m", seeds[1], "-c", "x/y.pt", "-i", src]) == 2
    assert "an ensemble takes a checkpoint name" in capsys.readouterr().err

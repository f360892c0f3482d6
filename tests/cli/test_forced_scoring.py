"""Forced scoring (``depnmt rescore``, :mod:`depnmt.decoding.forced`): the score of a model's
own beam output is the score its search reported, and a trained model prefers a correct
translation to a corrupted one."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from depnmt.decoding.forced import ForcedScorer
from depnmt.decoding.search import search_nbest

from .conftest import run_cli, train_tiny


@pytest.fixture(scope="module")
def trained(tiny_bpe, tmp_path_factory) -> Path:
    """A tiny model trained long enough (150 updates) to prefer word orders it has seen."""
    return train_tiny(tiny_bpe, tmp_path_factory.mktemp("forced") / "m", 150, 1000)


def corpus(tiny_bpe: Path) -> tuple[list[str], list[str]]:
    prepare = tiny_bpe.parent / "prepare"
    return [(prepare / f"test.raw.{lang}").read_text(encoding="utf-8").splitlines()
            for lang in ("en", "de")]


def test_forced_score_of_the_beam_output_is_the_search_score(trained, tiny_bpe):
    scorer = ForcedScorer.from_model_dir(trained, device="cpu", precision="fp32",
                                         max_tokens=300)       # several batches
    t = scorer.translator
    sources, _ = corpus(tiny_bpe)
    words = [t.src_tokenizer.tokenize(line) for line in sources]
    from depnmt.data.batches import collate
    batch = collate(t.examples(words), t.schemes)
    lists = search_nbest(t.model, batch.src, batch.src_feats, t.search_cfg, 2)
    hyps = [h for hyps in lists for h in hyps]
    forced = scorer.score_words([w for w, hyps in zip(words, lists) for _ in hyps],
                                [h.tokens for h in hyps], per_token=True)
    assert len(hyps) == 2 * len(sources)
    for h, f in zip(hyps, forced):
        assert f.tokens == len(h.tokens) + 1
        assert abs(f.logprob - h.logprob) < 1e-4 and abs(f.score - h.score) < 1e-4, (h, f)
        assert math.isclose(sum(f.token_logprobs), f.logprob, abs_tol=1e-9)
    # the text of a hypothesis, tokenized and segmented again, scores the same when it
    # becomes the same subwords (the model may spell a word in other subwords than BPE)
    texts = [t.to_text(h.tokens) for h in hyps]
    again = scorer.score_lines([s for s, hyps in zip(sources, lists) for _ in hyps], texts)
    same = [i for i, h in enumerate(hyps) if scorer.target_ids(texts[i]) == h.tokens]
    assert len(same) >= len(hyps) // 4
    assert all(abs(again[i].score - hyps[i].score) < 1e-4 for i in same)


def test_a_correct_translation_outscores_a_corrupted_one(trained, tiny_bpe):
    scorer = ForcedScorer.from_model_dir(trained, device="cpu", precision="fp32")
    sources, refs = corpus(tiny_bpe)
    correct = scorer.score_lines(sources, refs)
    reversed_ = scorer.score_lines(sources, [" ".join(r.split()[::-1]) for r in refs])
    wins = [c.score > r.score for c, r in zip(correct, reversed_)]
    assert sum(wins) >= 0.9 * len(wins)
    assert sum(c.score for c in correct) > sum(r.score for r in reversed_)


def test_the_command_writes_one_line_per_pair(trained, tiny_bpe, tmp_path, capsys):
    prepare = tiny_bpe.parent / "prepare"
    out = tmp_path / "scores.tsv"
    assert run_cli(["rescore", "-m", trained, "--src", prepare / "test.raw.en",
                    "--tgt", prepare / "test.raw.de", "-o", out, "--per-token",
                    "--precision", "fp32"]) == 0
    rows = [line.split("\t") for line in out.read_text(encoding="utf-8").splitlines()]
    sources, refs = corpus(tiny_bpe)
    assert len(rows) == len(sources) and all(len(row) == 4 for row in rows)
    scorer = ForcedScorer.from_model_dir(trained, device="cpu", precision="fp32")
    for row, expected in zip(rows, scorer.score_lines(sources, refs)):
        score, logprob, tokens, per = float(row[0]), float(row[1]), int(row[2]), row[3].split()
        assert tokens == expected.tokens == len(per) and score < 0
        assert abs(logprob - expected.logprob) < 1e-5 and abs(score - expected.score) < 1e-5
        assert abs(sum(map(float, per)) - logprob) < 1e-4
    capsys.readouterr()
    assert run_cli(["rescore", "-m", trained, "--src", prepare / "test.raw.en",
                    "--tgt", prepare / "test.raw.de", "--alpha", "0"]) == 0
    plain = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert all(float(s) == float(lp) for s, lp, _ in plain)


@pytest.mark.parametrize("src, tgt, where", [
    ("a man .\nthe dog .\n", "ein Mann .\n", "src.txt:2"),
    ("a man .\n", "ein Mann .\nder Hund .\n", "tgt.txt:2"),
    ("a man .\n\n", "ein Mann .\nder Hund .\n", "src.txt:2"),
])
def test_unpaired_or_empty_lines_are_one_error_line(trained, tmp_path, capsys, src, tgt, where):
    (tmp_path / "src.txt").write_text(src, encoding="utf-8")
    (tmp_path / "tgt.txt").write_text(tgt, encoding="utf-8")
    out = tmp_path / "scores.tsv"
    capsys.readouterr()
    assert run_cli(["rescore", "-m", trained, "--src", tmp_path / "src.txt",
                    "--tgt", tmp_path / "tgt.txt", "-o", out]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {tmp_path / where}: ") and err.count("\n") == 1
    assert not out.exists()


@pytest.mark.parametrize("scheme", ["abs", "abs+rel+dbsa_dec"])
def test_token_logprobs_add_up_to_the_search_scores_of_a_scheme(scheme):
    """On a model of the scheme (DBSA(Dec): a target-side tree scheme whose decoder induces
    its trees), the teacher-forced log-probabilities of the beam's hypotheses sum to the
    log-probabilities the search reported."""
    import torch

    from depnmt.core.vocab import BOS, EOS
    from depnmt.data.batches import pad_2d
    from depnmt.decoding.forced import token_logprobs
    from depnmt.decoding.search import SearchConfig
    from tests.tiny_models import padded_source, scheme_model
    model = scheme_model(scheme)
    src = padded_source(4, 9, torch.Generator().manual_seed(3))
    lists = search_nbest(model, src, {}, SearchConfig(beam=3, alpha=0.0), 3)
    hyps = [h for hyps in lists for h in hyps]
    rows = torch.tensor([b for b, hyps in enumerate(lists) for _ in hyps])
    with torch.no_grad():
        picked = token_logprobs(model, src[rows], {}, pad_2d([[BOS] + h.tokens for h in hyps]),
                                pad_2d([h.tokens + [EOS] for h in hyps]))
    for h, values in zip(hyps, picked.sum(1).tolist()):
        assert abs(values - h.logprob) < 1e-4 and abs(values - h.score) < 1e-4

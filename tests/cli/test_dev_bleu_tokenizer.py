"""Dev BLEU splits words as `score --lang` does for the target language (Japanese with MeCab,
not 13a, which splits only at spaces and punctuation), and a resumed run keeps the tokenizer
it started with, so that `best.pt` and `--patience` compare one BLEU."""

from __future__ import annotations

import json
import shutil

import pytest

from depnmt.training.validation import dev_bleu_metric, dev_bleu_record

from .conftest import TINY_MODEL, run_cli

REFS = ["私は昨日学校へ行きました。", "彼女は新しい本を読んでいます。", "猫が庭で寝ている。"]
HYPS = ["私は昨日学校に行きました。", "彼女は新しい本を読んでいる。", "猫が庭で寝ている。"]


def test_a_fresh_run_takes_the_target_languages_tokenizer():
    assert dev_bleu_record("ja") == {"tokenize": "ja-mecab"}
    assert dev_bleu_record("zh") == {"tokenize": "zh"}
    assert dev_bleu_record("de") == {"tokenize": "13a"}


def test_a_resumed_run_keeps_its_tokenizer():
    assert dev_bleu_record("ja", {"dev_bleu": {"tokenize": "ja-mecab"}}) == {"tokenize": "ja-mecab"}
    # a run of an earlier version scored its dev BLEU with 13a: it goes on doing so
    assert dev_bleu_record("ja", {"model": {}}) == {"tokenize": "13a"}


def test_japanese_dev_bleu_counts_words_not_clauses():
    """Two of three sentences differ by one particle or ending: with MeCab's words BLEU is
    high; 13a sees each sentence as one token and gives ~0 (what dev BLEU was for a Japanese
    target, and what chose best.pt)."""
    metric = dev_bleu_metric({"dev_bleu": {"tokenize": "ja-mecab"}})
    mecab = metric.corpus_score(HYPS, [REFS])
    plain = dev_bleu_metric({}).corpus_score(HYPS, [REFS])
    assert mecab.score > 50 and plain.score < 35
    assert "tok:ja-mecab" in str(metric.get_signature())


@pytest.mark.slow
def test_train_records_the_tokenizer_and_resume_keeps_it(tiny_bpe, tiny_model, tmp_path):
    config = json.loads((tiny_model / "config.json").read_text(encoding="utf-8"))
    assert config["dev_bleu"] == {"tokenize": "13a"}              # a German target
    model = tmp_path / "m"
    shutil.copytree(tiny_model, model)
    config["dev_bleu"] = {"tokenize": "char"}                     # as if recorded so
    (model / "config.json").write_text(json.dumps(config), encoding="utf-8")
    assert run_cli(["train", "-i", tiny_bpe, "-o", model, *TINY_MODEL, "--resume",
                    "--max-steps", "14"]) == 0
    again = json.loads((model / "config.json").read_text(encoding="utf-8"))
    assert again["dev_bleu"] == {"tokenize": "char"}

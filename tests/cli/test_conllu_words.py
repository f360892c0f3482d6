"""Pre-parsed source words (``translate --input-format conllu``, ``rescore --src-format conllu``)
reach the model as ``prepare`` made its training tokens: normalised and, for a model trained
with ``--lowercase``, lowercased (they were used as given: a treebank's capitals became other
subwords than the model was trained on, with exit 0), and messages name the file's line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from depnmt.stages.parse import Sentence, write_conllu
from depnmt.stages.tokenize import make_tokenizer

from .conftest import run_cli

WORDS = ["Two", "Young", "MEN", "are", "outside", "."]


@pytest.fixture(scope="module")
def lowercasing_model(tiny_model, tmp_path_factory) -> Path:
    """The tiny model, its source tokenizer recorded as lowercasing (its training text was
    lowercase already: Multi30k's first 400 English sentences are nearly all lowercase but
    their first words)."""
    model = tmp_path_factory.mktemp("lower") / "m"
    shutil.copytree(tiny_model, model)
    config = json.loads((model / "config.json").read_text())
    config["tokenizers"]["src"]["lowercase"] = True
    (model / "config.json").write_text(json.dumps(config, indent=1))
    return model


def chain(words: list[str]) -> Sentence:
    """A tree over ``words``: each word's head the word before it."""
    return Sentence(list(words), [0] + list(range(1, len(words))),
                    ["root"] + ["dep"] * (len(words) - 1))


def conllu(path: Path, *sentences: list[str]) -> Path:
    """A CoNLL-U file of one chain per word list."""
    write_conllu(path, [chain(words) for words in sentences])
    return path


def test_prepare_words_is_what_prepare_does_to_a_token():
    """Word for word: normalised (NFKC for Japanese), lowercased when set, never split or
    dropped; a word whose normalisation would be empty keeps its form; idempotent."""
    moses = make_tokenizer({"kind": "moses", "lang": "en", "lowercase": True})
    assert moses.prepare_words(WORDS) == ["two", "young", "men", "are", "outside", "."]
    assert moses.prepare_words(["\ufeff", "A"]) == ["\ufeff", "a"]
    tokens = moses.tokenize("Two young MEN are outside, aren't they?")
    assert moses.prepare_words(tokens) == tokens
    japanese = make_tokenizer({"kind": "sudachi", "lang": "ja"})
    assert japanese.prepare_words(["ＡＢＣ", "１２", "ｶﾀｶﾅ"]) == ["ABC", "12", "カタカナ"]
    assert make_tokenizer({"kind": "keep", "lang": "en"}).prepare_words(WORDS) == WORDS


def test_translate_conllu_lowercases_for_a_lowercasing_model(lowercasing_model, tmp_path,
                                                            capsys):
    """The capitalised sentence translates as its lowercase form does (as raw text does)."""
    outputs = []
    for name, words in (("cased", WORDS), ("lower", [w.lower() for w in WORDS])):
        path = conllu(tmp_path / f"{name}.conllu", words)
        assert run_cli(["translate", "-m", lowercasing_model, "--input-format", "conllu",
                        "-i", path, "--nbest", "2", "--beam", "2"]) == 0
        outputs.append(capsys.readouterr().out)
    raw = tmp_path / "raw.txt"
    raw.write_text(" ".join(WORDS) + "\n")
    assert run_cli(["translate", "-m", lowercasing_model, "-i", raw, "--nbest", "2",
                    "--beam", "2"]) == 0
    assert outputs[0] == outputs[1] == capsys.readouterr().out


def test_rescore_conllu_lowercases_for_a_lowercasing_model(lowercasing_model, tmp_path,
                                                          capsys):
    """The same translation scores the same against the capitalised and the lowercase
    source."""
    tgt = tmp_path / "tgt.txt"
    tgt.write_text("zwei junge männer sind draußen .\n")
    scores = []
    for name, words in (("cased", WORDS), ("lower", [w.lower() for w in WORDS])):
        path = conllu(tmp_path / f"{name}.conllu", words)
        assert run_cli(["rescore", "-m", lowercasing_model, "--src", path, "--src-format",
                        "conllu", "--tgt", tgt]) == 0
        scores.append(capsys.readouterr().out)
    assert scores[0] == scores[1] and scores[0].strip()


def test_translate_conllu_warnings_name_the_file_line(tiny_model, tmp_path, capsys):
    """A sentence truncated to the model's source limit is named by the line its block starts
    at in the file (line 4, after a one-word sentence's three lines; it was "line 2", its
    number among the sentences)."""
    limit = json.loads((tiny_model / "config.json").read_text()).get("max_src_len", 250)
    path = conllu(tmp_path / "long.conllu", ["a"], ["a"] * (limit + 5))
    assert run_cli(["translate", "-m", tiny_model, "--input-format", "conllu", "-i", path]) == 0
    assert f"input line 4: {limit + 5} subwords, truncated to {limit}" in capsys.readouterr().err

"""Tokenizers: config round-trips, robustness on any string, agreement with GiNZA."""

from __future__ import annotations

import json

import pytest

from depnmt.core.errors import DepnmtError
from depnmt.stages.tokenize import chunk_text, make_tokenizer

CONFIGS = [
    {"kind": "moses", "lang": "en"},
    {"kind": "moses", "lang": "de", "lowercase": True},
    {"kind": "sudachi", "lang": "ja"},
    {"kind": "keep", "lang": "en"},
    {"kind": "keep", "lang": "ja", "lowercase": True},
    {"kind": "keep"},
]

NASTY = ["", "   ", "\t\n\r", "\x00\x07a\x1fb\x7f", "\ufffd", "\ufeffBOM", "\ud800x",
         "a\u3000b\u00a0c\u2028d", "Ｆｕｌｌ－ｗｉｄｔｈ　１２３", "ｶﾀｶﾅ", "¨ ́", "…" * 5,
         "東京都に行きました。", "emoji 👍🏽 & <tag> \"quote\"", "x" * 5000]


@pytest.fixture(scope="module", params=CONFIGS, ids=lambda c: "-".join(map(str, c.values())))
def tok(request):
    return make_tokenizer(request.param)


def test_config_round_trips_through_json(tok):
    cfg = tok.config()
    again = make_tokenizer(json.loads(json.dumps(cfg)))
    assert again.config() == cfg
    assert type(again) is type(tok)


@pytest.mark.parametrize("text", NASTY)
def test_any_string_gives_clean_tokens(tok, text):
    tokens = tok.tokenize(text)
    assert all(t and not any(ch.isspace() for ch in t) for t in tokens)
    assert tokens == tok.tokenize(text)  # deterministic
    assert isinstance(tok.detokenize(tokens), str)
    reference, again = tok.process(text)
    assert again == tokens and "\n" not in reference


def test_kind_defaults_by_language():
    assert make_tokenizer({"lang": "ja"}).config()["kind"] == "sudachi"
    assert make_tokenizer({"lang": "de"}).config()["kind"] == "moses"


def test_unicode_normalisation_nfkc_for_japanese_only():
    ja = make_tokenizer({"lang": "ja", "kind": "keep"})
    assert ja.tokenize("ＡＢＣ１２３ ｶﾀｶﾅ") == ["ABC123", "カタカナ"]
    assert make_tokenizer({"lang": "en", "kind": "keep"}).tokenize("ＡＢＣ") == ["ＡＢＣ"]
    assert make_tokenizer({"lang": "en", "kind": "keep"}).tokenize("e\u0301") == ["\u00e9"]


def test_moses_lowercases_after_tokenizing_and_keeps_ampersand():
    tok = make_tokenizer({"kind": "moses", "lang": "en", "lowercase": True})
    # Lowercasing first would glue "runs." together (Moses keeps "." before a lowercase word).
    assert tok.tokenize("He runs. The cat & dog") == ["he", "runs", ".", "the", "cat", "&", "dog"]
    reference, _ = tok.process("He  runs.\tThe cat")
    assert reference == "he runs. the cat"


def test_moses_detokenize_inverts_tokenize():
    tok = make_tokenizer({"kind": "moses", "lang": "en"})
    text = 'A man, in a "blue" shirt, isn\'t running.'
    assert tok.detokenize(tok.tokenize(text)) == text


def test_keep_splits_on_whitespace_and_detokenizes_by_language():
    en = make_tokenizer({"kind": "keep", "lang": "en"})
    assert en.tokenize(" i can 't  tell . ") == ["i", "can", "'t", "tell", "."]
    assert en.process("i can 't tell .")[0] == "i can't tell."
    ja = make_tokenizer({"kind": "keep", "lang": "ja"})
    assert ja.process("私 は  学生 です 。")[0] == "私 は 学生 です 。"


def test_sudachi_handles_input_longer_than_its_limit():
    tok = make_tokenizer({"kind": "sudachi", "lang": "ja"})
    assert len(tok.tokenize("東京" * 30000)) > 1
    assert chunk_text("ab cd ef", 4) == ["ab", " cd", " ef"]


@pytest.mark.parametrize("cfg, message", [
    ({"kind": "spacy", "lang": "en"}, "unknown tokenizer 'spacy'"),
    ({"kind": "moses", "lang": "en", "mode": "C"}, "unknown key(s) mode"),
    ({"kind": "moses"}, "needs a language"),
    ({"kind": "sudachi", "mode": "D"}, "split mode"),
    ({"kind": "keep", "lang": "en", "unicode": "NFX"}, "normal form"),
])
def test_bad_configs_are_user_errors(cfg, message):
    with pytest.raises(DepnmtError, match=message.replace("(", r"\(").replace(")", r"\)")):
        make_tokenizer(cfg)


@pytest.fixture(scope="module")
def ginza_tokenizer():
    """ja_ginza's own tokenizer (the pipeline components are not needed to split words)."""
    spacy = pytest.importorskip("spacy")
    pytest.importorskip("ja_ginza")
    nlp = spacy.load("ja_ginza", exclude=["tok2vec", "parser", "ner", "morphologizer",
                                          "compound_splitter", "bunsetu_recognizer"])
    assert nlp.config["nlp"]["tokenizer"]["split_mode"] == "C"
    return nlp.tokenizer


@pytest.mark.parametrize("text", [
    "外国人参政権について、国会で議論されました。",
    "東京都立大学の学生が、選挙管理委員会に行った。",
    "私はテニス部員です。",
    "彼は2020年にiPhoneを買いました!",
])
def test_sudachi_tokens_match_ja_ginza(ginza_tokenizer, text):
    tok = make_tokenizer({"kind": "sudachi", "lang": "ja"})
    normalised = tok.normalise(text)
    assert tok.tokenize(text) == [t.text for t in ginza_tokenizer(normalised) if not t.is_space]

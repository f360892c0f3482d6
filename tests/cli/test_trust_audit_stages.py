"""The data stages' own outputs and the tree views that must not be silently wrong: dev and
test sentences that are also training sentences (``prepare`` scored a model on what it was
trained on without a word: no count, no warning, also for held-out splits of a training file
that repeats lines), ``--first N`` beyond the corpus (fewer pairs, silently), and ``inspect``'s
matrices of a line of several sentences (the structural and PASCAL matrices it printed were not
those the model trains on: it ignored the trees' ``SentIdx``)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from depnmt.cli import cli
from depnmt.stages.prepare import Settings, prepare
from depnmt.stages.tokenize import make_tokenizer

from .conftest import run_cli

TRAIN = (["A man walks .", "A dog runs .", "The cat sleeps .", "Kids play ball .",
          "A bird flies .", "A man walks ."],
         ["Ein Mann geht .", "Ein Hund rennt .", "Die Katze schläft .", "Kinder spielen Ball .",
          "Ein Vogel fliegt .", "Ein Mann geht ."])
DEV = (["A man walks .", "Something new .", ""], ["Ein Mann geht .", "Etwas Neues .", ""])
TEST = (["A dog runs .", "Something new .", "Other thing ."],
        ["Ein Hund läuft .", "Etwas Neues .", "Anderes Ding ."])


def corpus(folder: Path, **splits: tuple[list[str], list[str]]) -> list:
    """Write each split's en/de files into ``folder``; the flags that give them to prepare."""
    folder.mkdir(parents=True, exist_ok=True)
    flags: list = ["--src-lang", "en", "--tgt-lang", "de"]
    for split, pair in splits.items():
        for side, lang, lines in (("src", "en", pair[0]), ("tgt", "de", pair[1])):
            (folder / f"{split}.{lang}").write_text("".join(f"{line}\n" for line in lines),
                                                    encoding="utf-8")
            flags += [f"--{split}-{side}", folder / f"{split}.{lang}"]
    return flags


def overlap(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text(encoding="utf-8"))["overlap"]


def test_prepare_counts_and_warns_about_eval_sentences_in_train(tmp_path, capsys):
    flags = corpus(tmp_path / "raw", train=TRAIN, dev=DEV, test=TEST)
    assert run_cli(["prepare", *flags, "-o", tmp_path / "out"]) == 0
    err = capsys.readouterr().err
    assert overlap(tmp_path / "out") == {
        "dev": {"train": {"sentences": 2, "source": 1, "pair": 1}},     # the empty line: none
        "test": {"train": {"sentences": 3, "source": 1, "pair": 0},     # another target
                 "dev": {"sentences": 3, "source": 1, "pair": 1}}}
    assert ("warning: dev: 1 of its 2 sentences have their source in train too (1 the whole "
            "pair): the model is trained on them") in err
    assert "warning: test: 1 of its 3 sentences have their source in train too (0 the" in err
    assert "warning: test: 1 of its 3 sentences have their source in dev too (1 the" in err
    # nothing is dropped for it: every eval line stays, aligned with the input
    for split, pair in (("dev", DEV), ("test", TEST)):
        assert (tmp_path / "out" / f"{split}.raw.de").read_text(encoding="utf-8") == "".join(
            f"{line}\n" for line in pair[1])


def test_prepare_compares_what_it_writes(tmp_path, capsys):
    """Overlap after tokenization and --lowercase (what the model sees), none without; the
    library's manifest has the same record."""
    train = (["A Man walks."], ["Ein Mann geht."])
    flags = corpus(tmp_path / "raw", train=train, dev=(["a man walks ."], ["x ."]),
                   test=(["Nothing here."], ["Nichts."]))
    assert run_cli(["prepare", *flags, "-o", tmp_path / "cased"]) == 0
    assert overlap(tmp_path / "cased")["dev"]["train"]["source"] == 0
    assert "warning" not in capsys.readouterr().err
    raw = tmp_path / "raw"
    files = {split: (raw / f"{split}.en", raw / f"{split}.de") for split in ("train", "dev",
                                                                            "test")}
    tokenizers = tuple(make_tokenizer({"kind": "moses", "lang": lang, "lowercase": True})
                       for lang in ("en", "de"))
    manifest = prepare(tmp_path / "lower", files, Settings(src_lang="en", tgt_lang="de",
                                                           lowercase=True), tokenizers)
    assert manifest["overlap"]["dev"]["train"] == {"sentences": 1, "source": 1, "pair": 0}


def test_held_out_splits_of_a_file_that_repeats_lines_are_counted(tmp_path, capsys):
    src = [f"Sentence number {i} ." for i in range(8)] + ["Sentence number 2 ."]
    tgt = [f"Satz Nummer {i} ." for i in range(8)] + ["Satz Nummer 2 ."]
    flags = corpus(tmp_path / "raw", train=(src, tgt))
    assert run_cli(["prepare", *flags, "--dev-size", "2", "--test-size", "1",
                    "-o", tmp_path / "out"]) == 0
    assert overlap(tmp_path / "out")["test"]["train"] == {"sentences": 1, "source": 1, "pair": 1}
    assert "warning: test: 1 of its 1 sentences have their source in train too" in (
        capsys.readouterr().err)


def test_first_beyond_the_corpus_says_how_many_pairs_there_are(tmp_path, capsys):
    flags = corpus(tmp_path / "raw", train=TRAIN, dev=DEV, test=TEST)
    assert run_cli(["prepare", *flags, "--first", "100", "-o", tmp_path / "out"]) == 0
    assert (f"warning: {tmp_path / 'raw' / 'train.en'}: --first 100, but the training files "
            f"have only 6 pairs; all of them are read") in capsys.readouterr().err
    assert run_cli(["prepare", *flags, "--first", "6", "-o", tmp_path / "out"]) == 0
    assert "--first" not in capsys.readouterr().err


# "He left . She stayed ." parsed as two sentences and joined by the parse stage: "stayed"
# hangs on "left" as parataxis, SentIdx keeps each word's sentence.
TWO_SENTENCES = "".join(
    f"{i}\t{word}\t_\tX\t_\t_\t{head}\t{rel}\t_\tSentIdx={sent}\n"
    for i, (word, head, rel, sent) in enumerate(
        [("He", 2, "nsubj", 0), ("left", 0, "root", 0), (".", 2, "punct", 0),
         ("She", 5, "nsubj", 1), ("stayed", 2, "parataxis", 1), (".", 5, "punct", 1)], 1)) + "\n"

# The structural scheme undoes the join: two trees, left and stayed their roots (depth 0), the
# others depth 1; on one root path abs(x_i) − abs(x_j), else ±(abs(x_i) + abs(x_j)), + for
# i > j (Wang et al. 2019). PASCAL: stayed is its own sentence's root, so its own parent.
STRUCTURAL = """\
He 0 1 -2 -2 -1 -2
left -1 0 -1 -1 0 -1
. 2 1 0 -2 -1 -2
She 2 1 2 0 1 -2
stayed 1 0 1 -1 0 -1
. 2 1 2 2 1 0"""
PASCAL_STAYED = ["stayed", "0.00", "0.00", "0.05", "0.24", "0.40", "0.24"]


def inspect(tmp_path: Path, scheme: str) -> list[list[str]]:
    trees = tmp_path / "two.conllu"
    trees.write_text(TWO_SENTENCES, encoding="utf-8")
    result = CliRunner().invoke(cli, ["inspect", "--scheme", scheme, "-i", str(trees)])
    assert result.exit_code == 0, result.output
    return [row.split("\t") for row in result.output.splitlines()]


def test_inspect_shows_a_line_of_two_sentences_as_the_model_sees_it(tmp_path):
    rows = inspect(tmp_path, "abs+structural")
    assert rows[1:] == [row.split(" ") for row in STRUCTURAL.splitlines()]
    assert inspect(tmp_path, "abs+pascal")[5] == PASCAL_STAYED


def test_inspect_prints_the_features_training_computes(tmp_path):
    """What inspect prints is the scheme's labels of the tree as training reads it (the
    CoNLL-U reader, SentIdx included)."""
    from types import SimpleNamespace

    from depnmt.core.conllu import read_conllu
    from depnmt.model.schemes.registry import build_schemes, scheme_entries
    rows = inspect(tmp_path, "abs+structural")
    tree, = read_conllu(tmp_path / "two.conllu")
    scheme, = build_schemes(scheme_entries(["structural"], {"structural_k": 6}))
    example = SimpleNamespace(index=0, src=[0] * 7, src_subwords=list(tree.words),
                              src_tree=tree)
    labels = scheme.pair_labels(example).tolist()
    assert [row[1:] for row in rows[1:]] == [[scheme.label_text(v) for v in row]
                                             for row in labels]


def test_multitask_leaves_an_empty_source_line_empty(tmp_path):
    """An empty dev/test line (and a kept empty training line) was tagged: the model was
    asked to translate the tag alone, and its hypothesis scored against an empty reference."""
    from depnmt.core.conllu import Sentence, write_conllu
    train = (["A man walks .", "", "A dog runs ."], ["Ein Mann geht .", "", "Ein Hund rennt ."])
    flags = corpus(tmp_path / "raw", train=train, dev=DEV, test=TEST)
    prepare_dir, given = tmp_path / "prepare", tmp_path / "given"
    assert run_cli(["prepare", *flags, "--min-len", "0", "-o", prepare_dir]) == 0
    given.mkdir()
    for split in ("train", "dev", "test"):
        lines = (prepare_dir / f"{split}.en").read_text(encoding="utf-8").splitlines()
        write_conllu(given / f"{split}.en.conllu",
                     [Sentence(words, [0] + [1] * (len(words) - 1),
                               ["root"] + ["dep"] * (len(words) - 1)) if words
                      else Sentence.empty() for words in (line.split() for line in lines)])
    assert run_cli(["parse", "-i", prepare_dir, "-o", tmp_path / "parse", "--backend", "conllu",
                    "--conllu-dir", given]) == 0
    out = tmp_path / "multitask"
    assert run_cli(["multitask", "-i", prepare_dir, "-t", tmp_path / "parse", "-o", out]) == 0
    for name in ("dev.en", "dev.raw.en"):
        assert (out / name).read_text(encoding="utf-8").splitlines() == [
            "xxtranslatexx A man walks .", "xxtranslatexx Something new .", ""]
    src = (out / "train.en").read_text(encoding="utf-8").splitlines()
    tgt = (out / "train.de").read_text(encoding="utf-8").splitlines()
    assert src == ["xxtranslatexx A man walks .", "", "xxtranslatexx A dog runs .",
                   "xxparsexx A man walks .", "xxparsexx A dog runs ."]
    assert tgt[1] == "" and tgt[3:] == ["(root A (dep man ) (dep walks ) (dep . ) )",
                                        "(root A (dep dog ) (dep runs ) (dep . ) )"]
    counts = json.loads((out / "manifest.json").read_text(encoding="utf-8"))["counts"]
    assert counts["train"] == {"translate": 3, "parse": 2}

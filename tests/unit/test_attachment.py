"""Attachment scores (``depnmt.evaluation.attachment``, ``depnmt analyze uas``) on hand-made trees
and on
real UD files."""

from __future__ import annotations

from itertools import islice

import pytest
from click.testing import CliRunner

from depnmt.cli import cli, main
from depnmt.core.errors import DepnmtError
from depnmt.evaluation.attachment import attachment_score
from depnmt.stages.parse import Sentence, read_conllu, write_conllu

WORDS = ["My", "father", "bought", "a", "red", "car", "."]
GOLD = Sentence(WORDS, [2, 3, 0, 6, 6, 3, 3],
                ["nmod:poss", "nsubj", "root", "det", "amod", "obj", "punct"])


def test_uas_and_las_count_heads_and_labels():
    # wrong head for "red" (5 -> 3), wrong label for "a" (det -> amod), subtype dropped for "My"
    pred = Sentence(WORDS, [2, 3, 0, 6, 3, 3, 3], ["nmod", "nsubj", "root", "amod", "amod",
                                                   "obj", "punct"])
    s = attachment_score([pred], [GOLD])
    assert (s.sentences, s.words, s.heads, s.labelled) == (1, 7, 6, 5)
    assert s.uas == pytest.approx(600 / 7) and s.las == pytest.approx(500 / 7)
    strict = attachment_score([pred], [GOLD], universal_labels=False)
    assert strict.labelled == 4                                 # nmod ≠ nmod:poss
    no_punct = attachment_score([pred], [GOLD], punct=False)
    assert (no_punct.words, no_punct.heads) == (6, 5)


def test_unlabelled_trees_have_no_las():
    induced = Sentence(WORDS, GOLD.heads, ["root" if h == 0 else "dep" for h in GOLD.heads])
    s = attachment_score([induced], [GOLD])
    assert s.uas == 100.0 and s.las is None


def test_differing_words_or_sentence_counts_are_errors_naming_the_sentence():
    other = Sentence(WORDS[:3] + ["an"] + WORDS[4:], GOLD.heads, GOLD.deprels)
    with pytest.raises(DepnmtError, match=r"p\.conllu: sentence 2 has other words .* word 4: "
                                          r"'an' vs 'a'"):
        attachment_score([GOLD, other], [GOLD, GOLD], "p.conllu", "g.conllu")
    with pytest.raises(DepnmtError, match="has 1 sentences"):
        attachment_score([GOLD], [GOLD, GOLD])
    with pytest.raises(DepnmtError, match="more sentences"):
        attachment_score([GOLD, GOLD], [GOLD])


def test_analyze_uas_on_a_ud_treebank(shared_data, tmp_path):
    gold = tmp_path / "gold.conllu"
    write_conllu(gold, islice(read_conllu(shared_data / "ud" / "en_ewt-ud-test.conllu"), 50))
    flat = tmp_path / "flat.conllu"              # every word attached to the first one
    write_conllu(flat, [Sentence(s.words, [0] + [1] * (len(s) - 1),
                                 ["root"] + ["dep"] * (len(s) - 1)) for s in read_conllu(gold)])
    result = CliRunner().invoke(cli, ["analyze", "uas", "--gold", str(gold), str(gold),
                                      str(flat)])
    assert result.exit_code == 0, result.output
    rows = [line.split("\t") for line in result.output.splitlines()]
    assert rows[0] == ["trees", "sentences", "words", "UAS", "LAS"]
    assert rows[1][1:] == ["50", rows[1][2], "100.00", "100.00"]
    assert float(rows[2][3]) < 30 and rows[2][4] == "-"


def test_analyze_uas_scores_a_parser_backend_on_the_gold_words(shared_data, tmp_path):
    pytest.importorskip("ja_ginza")
    gold = tmp_path / "gold.conllu"
    write_conllu(gold, islice(read_conllu(shared_data / "ud" / "ja_gsd-ud-test.conllu"), 20))
    result = CliRunner().invoke(cli, ["analyze", "uas", "--gold", str(gold), "--backend",
                                      "spacy", "--model", "ja_ginza"])
    assert result.exit_code == 0, result.output
    name, sentences, _, uas, las = result.output.splitlines()[-1].split("\t")
    assert name.startswith("spacy ja_ginza") and sentences == "20"
    assert 70 < float(uas) <= 100 and 60 < float(las) <= float(uas)


def test_analyze_uas_errors_are_one_line(tmp_path, capsys):
    gold, other = tmp_path / "gold.conllu", tmp_path / "other.conllu"
    write_conllu(gold, [GOLD])
    write_conllu(other, [Sentence(WORDS[:-1], GOLD.heads[:-1], GOLD.deprels[:-1])])
    for args, message in ((["--gold", gold], "nothing to score"),
                          (["--gold", gold, other], "other.conllu:1: has other words")):
        with pytest.raises(SystemExit) as exit_:
            main(["analyze", "uas", *map(str, args)])
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err

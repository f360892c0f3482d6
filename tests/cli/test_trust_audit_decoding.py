"""Scores that must not be silently wrong: BLEU of Japanese or Chinese running text split by
sacreBLEU's default tokenizer (13a splits only at spaces and punctuation, so whole clauses were
counted as words and the score was meaningless, said only by ``tok:13a`` in the signature), and
a file that begins with a byte order mark (counted as part of its first word: identical files
scored below 100)."""

from __future__ import annotations

import json

import pytest
import sacrebleu

from depnmt.core.errors import InputError
from depnmt.evaluation import score as sc

from .conftest import run_cli

JAPANESE = ["私は学生です。", "今日は天気がいいです。", "猫が好きですが、犬も好きです。"]
CLOSE = ["私は学生でした。", "今日は天気が悪いです。", "猫が好きですが、犬も好きです。"]
SEGMENTED = ["私 は 学生 です 。", "今日 は 天気 が いい です 。", "猫 が 好き です が 、 犬 も 好き です 。"]


def write(path, lines: list[str], prefix: str = ""):
    path.write_text(prefix + "".join(f"{line}\n" for line in lines), encoding="utf-8")
    return path


def test_bleu_of_unsegmented_japanese_needs_its_tokenizer(tmp_path, capsys):
    ref, hyp = write(tmp_path / "ref.ja", JAPANESE), write(tmp_path / "hyp.ja", CLOSE)
    score = ["score", "--ref", ref, "--bootstrap", "0", "--json", hyp]
    assert run_cli(score) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {ref}: the references are Japanese or Chinese without spaces "
                          f"between words, which BLEU's default tokenizer (13a)")
    assert "give --lang ja or --lang zh" in err and len(err.strip().splitlines()) == 1
    for flags in (["--tokenize", "char"], ["--lang", "zh"], ["--tokenize", "13a"],
                  ["--metrics", "chrf"]):            # a tokenizer named, or no BLEU: as asked
        assert run_cli([*score, *flags]) == 0
        record = json.loads(capsys.readouterr().out)
        if "bleu" in record:
            assert record["bleu"] == sacrebleu.corpus_bleu(CLOSE, [JAPANESE], tokenize=(
                flags[1] if flags[0] == "--tokenize" else "zh")).score
    segmented = write(tmp_path / "ref.tok.ja", SEGMENTED)      # words split by spaces: 13a fits
    assert run_cli(["score", "--ref", segmented, "--bootstrap", "0", segmented]) == 0
    with pytest.raises(InputError, match="Japanese or Chinese without spaces"):
        sc.corpus_scores(CLOSE, [JAPANESE], tokenize=None)


def test_report_refuses_unsegmented_japanese_with_the_default_tokenizer(tiny_model, tmp_path,
                                                                        capsys):
    ref, hyp = write(tmp_path / "ref.ja", JAPANESE), write(tmp_path / "hyp.ja", CLOSE)
    report = ["report", "--ref", ref, "--bootstrap", "0", "--shuffles", "0",
              "-s", "abs", tiny_model, hyp]
    assert run_cli(report) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {ref}: the references are Japanese or Chinese")
    assert run_cli([*report, "--tokenize", "char", "-o", tmp_path / "r"]) == 0
    records = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert records[0]["runs"][0]["bleu"] == sacrebleu.corpus_bleu(CLOSE, [JAPANESE],
                                                                  tokenize="char").score


@pytest.mark.parametrize("marked", ["hyp", "ref"])
def test_a_byte_order_mark_is_not_scored_as_text(marked, tiny_bpe, tiny_model, tmp_path,
                                                 capsys):
    lines = (tiny_bpe.parent / "prepare" / "test.raw.de").read_text(encoding="utf-8").split("\n")
    lines = [line for line in lines if line][:10]
    ref = write(tmp_path / "ref.de", lines, "\ufeff" if marked == "ref" else "")
    hyp = write(tmp_path / "hyp.de", lines, "\ufeff" if marked == "hyp" else "")
    marked_file = ref if marked == "ref" else hyp
    assert run_cli(["score", "--ref", ref, "--bootstrap", "0", "--json", hyp]) == 0
    out, err = capsys.readouterr()
    record = json.loads(out)
    assert (record["bleu"], record["chrf"], record["ter"]) == (pytest.approx(100.0), 100.0, 0.0)
    assert f"warning: {marked_file}: begins with a byte order mark (U+FEFF)" in err
    assert run_cli(["report", "--ref", ref, "--bootstrap", "0", "--shuffles", "0",
                    "-s", "abs", tiny_model, hyp, "-o", tmp_path / "r"]) == 0
    run = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))[0]["runs"][0]
    assert (run["bleu"], run["chrf"]) == (pytest.approx(100.0), 100.0)

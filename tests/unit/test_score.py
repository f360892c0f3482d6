"""Tests of ``depnmt score`` and ``depnmt/evaluation/score.py``: published WMT22 scores, bootstrap,
buckets."""

from __future__ import annotations

import csv
import importlib.util
import json
import random
from pathlib import Path

import pytest
import sacrebleu

from depnmt.cli import main
from depnmt.core.errors import DepnmtError
from depnmt.evaluation import score as sc

WMT = "wmt22"


def run_cli(args: list[str], capsys) -> tuple[int, str, str]:
    """Run ``depnmt ARGS`` in-process; return (exit code, stdout, stderr)."""
    try:
        main([str(a) for a in args])
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def json_records(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines()]


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return path


# ------------------------------------------------------------------ published WMT22 scores

def published(data: Path) -> dict[tuple[str, str, str], float]:
    """``(pair, system, metric) -> score`` from the organisers' automatic-scores.tsv."""
    with open(data / WMT / "automatic-scores.tsv", encoding="utf-8") as fh:
        return {(r["pair"], r["system"], r["metric"]): float(r["score"])
                for r in csv.DictReader(fh, delimiter="\t")}


# (pair, reference ids, extra options, systems, published metric suffix)
WMT_CASES = [
    ("en-de", "AB", [], ["Online-B"], "all"),  # two references
    ("en-ja", "A", ["--tokenize", "char"], ["DLUT"], "A"),         # char-tokenized BLEU
    ("de-en", "A", [], ["LT22"], "A"),
]


@pytest.mark.parametrize("pair,ref_ids,options,systems,suffix", WMT_CASES,
                         ids=[case[0] for case in WMT_CASES])
def test_reproduces_published_wmt22_scores(shared_data, capsys, pair, ref_ids, options, systems,
                                           suffix):
    """`depnmt score --json` prints exactly the published BLEU and chrF (every float digit)."""
    root = shared_data / WMT
    tgt = pair.split("-")[1]
    refs = [arg for rid in ref_ids
            for arg in ("--ref", root / "references" / f"generaltest2022.{pair}.ref.{rid}.{tgt}")]
    hyps = [root / "system-outputs" / f"generaltest2022.{pair}.hyp.{name}.{tgt}"
            for name in systems]
    code, out, err = run_cli(["score", *refs, *options, "--metrics", "bleu,chrf",
                              "--bootstrap", "0", "--json", *hyps], capsys)
    assert code == 0, err
    table = published(shared_data)
    for name, record in zip(systems, json_records(out)):
        assert record["bleu"] == table[(pair, name, f"bleu-{suffix}")], name
        assert record["chrf"] == table[(pair, name, f"chrf-{suffix}")], name
        assert f"nrefs:{len(ref_ids)}|" in record["signature"]["bleu"]


def test_corpus_scores_matches_sacrebleu():
    hyps = ["the cat sat on the mat", "a dog barked .", ""]
    refs = [["the cat sat on a mat", "the dog barked .", "nothing"],
            ["a cat sat on the mat", "a dog was barking .", "none"]]
    got = sc.corpus_scores(hyps, refs)
    assert got["bleu"] == sacrebleu.corpus_bleu(hyps, refs).score
    assert got["chrf"] == sacrebleu.corpus_chrf(hyps, refs).score
    assert got["ter"] == sacrebleu.corpus_ter(hyps, refs).score
    assert set(got["signature"]) == {"bleu", "chrf", "ter"}
    assert "tok:13a" in got["signature"]["bleu"]
    chars = sc.corpus_scores(hyps, refs, tokenize="char", metrics=("bleu",))
    assert set(chars) == {"bleu", "signature"}
    assert chars["bleu"] == sacrebleu.corpus_bleu(hyps, refs, tokenize="char").score


def test_corpus_scores_rejects_mismatch():
    with pytest.raises(DepnmtError, match="2 lines but reference 1 has 1 lines"):
        sc.corpus_scores(["a", "b"], [["a"]])


# ------------------------------------------------------------------------ paired bootstrap

def synthetic(n: int = 300, seed: int = 0) -> tuple[list[str], list[str], list[str]]:
    """References, a close hypothesis and a poor one (most words replaced)."""
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(200)]
    refs = [" ".join(rng.choices(vocab, k=rng.randint(5, 25))) for _ in range(n)]

    def corrupt(line: str, rate: float) -> str:
        return " ".join(w if rng.random() > rate else rng.choice(vocab) for w in line.split())

    return refs, [corrupt(r, 0.1) for r in refs], [corrupt(r, 0.5) for r in refs]


def test_bootstrap_clearly_better_system_is_significant():
    refs, good, poor = synthetic()
    p = sc.paired_bootstrap(poor, good, [refs], n_samples=200, seed=1)
    assert set(p) == {"bleu", "chrf"}
    assert p["bleu"] < 0.01 and p["chrf"] < 0.01
    # the test is symmetric: a clearly worse system is just as significant
    assert sc.paired_bootstrap(good, poor, [refs], n_samples=200, seed=1)["bleu"] < 0.01


def test_bootstrap_identical_systems_are_not_significant():
    refs, good, _ = synthetic()
    p = sc.paired_bootstrap(good, list(good), [refs], n_samples=200)
    assert p == {"bleu": 1.0, "chrf": 1.0}


def test_bootstrap_small_difference_gives_large_p():
    refs, good, _ = synthetic()
    nearly = list(good)
    nearly[0] = refs[0]  # one sentence fixed out of 300
    p = sc.paired_bootstrap(good, nearly, [refs], n_samples=200, seed=3)["bleu"]
    assert p > 0.05


def test_bootstrap_is_seeded_and_resamples_are_paired():
    weights = list(sc.resample_weights(7, 5, seed=42))
    again = list(sc.resample_weights(7, 5, seed=42))
    assert all((a == b).all() for a, b in zip(weights, again))
    assert all((w.sum(axis=1) == 7).all() for w in weights)  # each resample has n sentences


def test_bootstrap_p_value_rule():
    import numpy as np
    assert sc.bootstrap_p_value(0.0, np.array([1.0, -1.0])) == 1.0
    assert sc.bootstrap_p_value(2.0, np.array([1.0, 0.0, -1.0, 3.0])) == (2 + 1) / (4 + 1)
    assert sc.bootstrap_p_value(-2.0, np.array([-1.0, -3.0, 0.5])) == (1 + 1) / (3 + 1)


# ----------------------------------------------------------------------------- buckets

def test_bucket_boundaries_are_half_open():
    lengths = [0, 5, 19, 20, 29, 30, 45, 50, 80]
    src = [" ".join(["x"] * n) for n in lengths]
    assert sc.assign_buckets(src).tolist() == [0, 0, 0, 1, 1, 2, 3, 4, 4]
    assert sc.bucket_labels(sc.DEFAULT_BUCKETS) == ["0-19", "20-29", "30-39", "40-49", "50+"]
    assert sc.parse_buckets("0,10") == (0, 10)
    for bad in ("5,10", "0,10,10", "0,a"):
        with pytest.raises(DepnmtError, match="--buckets"):
            sc.parse_buckets(bad)


# ---------------------------------------------------------------------------------- CLI

@pytest.fixture()
def small(tmp_path: Path) -> dict[str, Path]:
    """Hand-made files: 6 sentences, source lengths 3, 19, 20, 25, 31, 55 words."""
    refs, good, poor = synthetic(n=6, seed=5)
    src = [" ".join(["s"] * n) for n in (3, 19, 20, 25, 31, 55)]
    return {"ref": write(tmp_path / "ref.txt", refs), "good": write(tmp_path / "good.txt", good),
            "poor": write(tmp_path / "poor.txt", poor), "src": write(tmp_path / "src.txt", src),
            "dir": tmp_path}


def test_json_output(small, capsys):
    code, out, err = run_cli(["score", "--ref", small["ref"], "--src", small["src"],
                              "--bootstrap", "50", "--json", small["poor"], small["good"]], capsys)
    assert code == 0, err
    first, second = json_records(out)
    for record in (first, second):
        assert {"hyp", "bleu", "chrf", "ter", "signature", "buckets"} <= set(record)
        assert "tok:13a" in record["signature"]["bleu"]
    assert first["hyp"] == str(small["poor"]) and second["hyp"] == str(small["good"])
    assert "p_bleu" not in first and 0 < second["p_bleu"] <= 1 and 0 < second["p_chrf"] <= 1
    assert [b["bucket"] for b in first["buckets"]] == ["0-19", "20-29", "30-39", "40-49", "50+"]
    assert [b["sentences"] for b in first["buckets"]] == [2, 2, 1, 0, 1]
    assert first["buckets"][3]["bleu"] is None
    # a bucket's BLEU is the corpus BLEU of its sentences
    refs = small["ref"].read_text().splitlines()
    hyps = small["poor"].read_text().splitlines()
    assert first["buckets"][0]["bleu"] == sacrebleu.corpus_bleu(hyps[:2], [refs[:2]]).score


def test_table_output_and_bucket_plot(small, capsys):
    plot = small["dir"] / "delta.png"
    code, out, err = run_cli(["score", "-r", small["ref"], "--src", small["src"], "--buckets",
                              "0,20", "--chrf-word-order", "2", "--bucket-plot", plot,
                              "--bootstrap", "20", small["poor"], small["good"]], capsys)
    assert code == 0, err
    for text in ("BLEU", "chrF++", "TER", "p(BLEU)", "20+", "BLEU signature: nrefs:1|",
                 "nw:2", "good.txt"):
        assert text in out
    assert plot.read_bytes().startswith(b"\x89PNG")


def test_line_count_mismatch_is_a_one_line_error(small, capsys):
    short = write(small["dir"] / "short.txt", ["only one line"])
    code, out, err = run_cli(["score", "--ref", small["ref"], short], capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:")
    assert str(short) in lines[0] and str(small["ref"]) in lines[0]
    assert "1 lines" in lines[0] and "6 lines" in lines[0]
    assert "Traceback" not in err


def test_source_mismatch_and_bad_plot_request(small, capsys):
    src = write(small["dir"] / "src5.txt", ["a"] * 5)
    code, _, err = run_cli(["score", "--ref", small["ref"], "--src", src, small["good"]], capsys)
    assert code == 2 and "src5.txt" in err and "5 lines" in err
    code, _, err = run_cli(["score", "--ref", small["ref"], "--bucket-plot", small["dir"] / "x.png",
                            small["good"]], capsys)
    assert code == 2 and err.startswith("error: --bucket-plot needs --src")


def test_an_empty_bucket_plot_name_is_refused(small, capsys, monkeypatch):
    """``--bucket-plot ''`` (e.g. an unset shell variable) is an error, not "no plot"."""
    monkeypatch.chdir(small["dir"])
    code, _, err = run_cli(["score", "-r", small["ref"], "--src", small["src"], "--bucket-plot",
                            "", small["poor"], small["good"]], capsys)
    assert code == 2 and err.endswith("Error: Invalid value for '--bucket-plot': an empty path "
                                      "(an unset shell variable?); '.' is the current "
                                      "folder.\n")
    assert sorted(p.name for p in small["dir"].iterdir() if p.suffix == ".png") == []


def test_invalid_utf8_and_empty_lines_are_scored(small, capsys):
    lines = small["good"].read_bytes().split(b"\n")
    lines[1] = b"caf\xe9 " + lines[1]
    lines[2] = b""
    bad = small["dir"] / "bad.txt"
    bad.write_bytes(b"\n".join(lines))
    code, out, err = run_cli(["score", "--ref", small["ref"], "--metrics", "bleu", "--json", bad],
                             capsys)
    assert code == 0
    assert "warning:" in err and f"{bad}:2" in err
    assert set(json_records(out)[0]) == {"hyp", "bleu", "signature"}


@pytest.mark.skipif(importlib.util.find_spec("MeCab") is not None, reason="MeCab is installed")
def test_missing_japanese_tokenizer_is_a_user_error(small, capsys):
    code, _, err = run_cli(["score", "--ref", small["ref"], "--lang", "ja", small["good"]], capsys)
    assert code == 2 and err.startswith("error:") and "--tokenize" in err


@pytest.mark.parametrize("names, message", [([], "no metric given"),
                                            (["bleu", "bogus"], "unknown metric 'bogus'")])
def test_metric_names_are_checked(names, message):
    """`score --metrics ,` gave a table of no scores; an unknown name is named."""
    with pytest.raises(DepnmtError, match=f"^{message} \\(choose from bleu, chrf, ter\\)"):
        sc.make_metrics(names)

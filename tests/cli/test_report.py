"""``depnmt report``: the results table of trained systems (training logs + sacreBLEU +
paired bootstrap against several baselines), and its errors."""

from __future__ import annotations

import json
import random

from .conftest import run_cli


def write_hyps(tiny_bpe, tmp_path):
    """The reference itself (a perfect system), and the reference with shuffled words."""
    ref = tiny_bpe.parent / "prepare" / "test.raw.de"
    lines = ref.read_text(encoding="utf-8").splitlines()
    rng = random.Random(0)
    shuffled = []
    for line in lines:
        words = line.split()
        rng.shuffle(words)
        shuffled.append(" ".join(words))
    good, bad = tmp_path / "good.de", tmp_path / "bad.de"
    good.write_text("\n".join(lines) + "\n", encoding="utf-8")
    bad.write_text("\n".join(shuffled) + "\n", encoding="utf-8")
    return ref, good, bad


def test_report_table_json_and_plot(tiny_model, tiny_bpe, tmp_path, capsys):
    ref, good, bad = write_hyps(tiny_bpe, tmp_path)
    out = tmp_path / "res" / "results"
    assert run_cli(["report", "--ref", ref, "-b", "bad", "-b", "good", "-o", out, "--bootstrap",
                    "200", "-s", "bad", tiny_model, bad, "-s", "good", tiny_model, good]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split(" | ")[-2:] == ["p vs bad", "p vs good |"]
    good_row = [c.strip() for c in table[3].strip("|").split("|")]
    assert good_row[0] == "good" and good_row[1] == "abs" and good_row[7] == "100.00"
    assert float(good_row[9]) < 0.05 and good_row[10] == "-"     # better than bad; not vs itself
    records = json.loads(out.with_suffix(".json").read_text())
    metrics = [json.loads(line) for line in (tiny_model / "metrics.jsonl").read_text().splitlines()]
    assert records[1]["updates"] == 12 and records[1]["parameters"] == metrics[0]["parameters"]
    assert records[0]["tok_s_ratio"] == 1.0 and records[1]["p_chrf_vs_bad"] < 0.05
    assert out.with_suffix(".md").read_text() == "\n".join(table) + "\n"
    assert out.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"


def test_report_errors_are_one_line(tiny_model, tiny_bpe, tmp_path, capsys):
    ref, good, bad = write_hyps(tiny_bpe, tmp_path)
    short = tmp_path / "short.de"
    short.write_text("ein Hund\n", encoding="utf-8")
    cases = [
        (["-b", "rel", "-s", "abs", tiny_model, good], "baseline 'rel' is not one of the systems"),
        (["-s", "abs", tiny_model, good, "-s", "abs", tiny_model, bad], "must be unique"),
        (["-s", "abs", tiny_model, short], "short.de has 1 lines"),
        (["-s", "abs", tmp_path, good], "no config.json"),
    ]
    for args, message in cases:
        assert run_cli(["report", "--ref", ref, *args]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err

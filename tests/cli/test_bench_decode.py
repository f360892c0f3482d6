"""``bench/decode.py --tiny``: one command reports depnmt's decoding (fp32, auto) against
CTranslate2 (float32, int8) on the same model: start-up and steady state apart, BLEU, and the
scheme models' speed as a ratio to abs."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from tests.scripts import load_script


def test_tiny_bench_reports_every_system_against_ctranslate2(tiny_model, tiny_bpe, tmp_path):
    pytest.importorskip("ctranslate2",
                        reason="CTranslate2 is an optional extra (pip install depnmt[ct2])")
    prepared = tiny_bpe.parent / "prepare"
    bench = load_script("decode")
    result = CliRunner().invoke(bench.main, [
        "-m", str(tiny_model), "-i", str(prepared / "test.raw.en"),
        "-r", str(prepared / "test.raw.de"), "--threads", "1", "--tiny",
        "--scheme-model", str(tiny_model)])
    assert result.exit_code == 0, result.output
    out = result.output
    assert re.search(r"8 lines, beam 4, 1 threads, 1 rounds; load average [\d.]+ ", out)
    assert "CPU flags: " in out
    rows = {m[0]: m[1:] for m in re.findall(
        r"^\| ([^|]+?) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|$", out, re.M)}
    assert set(rows) == {"depnmt fp32", "depnmt auto", "CTranslate2 float32",
                         "CTranslate2 int8"}, out
    assert rows["CTranslate2 float32"][2] == "1.00"               # the ratio's base
    assert all(float(start) > 0 and float(speed) > 0 for start, speed, _, _ in rows.values())
    schemes = re.findall(r"^\| (.+) \(decoding\) \| ([\d.]+) \| ([\d.]+) \|$", out, re.M)
    assert len(schemes) == 2 and schemes[0][2] == "1.00"        # abs, then the scheme model

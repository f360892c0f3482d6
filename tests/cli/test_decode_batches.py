"""``bench/decode_batches.py`` (decoding speed and memory against --max-tokens and precision)
runs on the CPU: this checks the script and what it reports, not the speed."""

from __future__ import annotations

import re

from click.testing import CliRunner

from tests.scripts import load_script

ROW = re.compile(r"^\| (\w+) \| (\d+) \| ([\d,]+) \| ([\d, ]+) \| ([\d.]+|-) \| (\S+) \| (\S+) \|$",
                 re.M)


def run(args: list) -> list[tuple]:
    result = CliRunner().invoke(load_script("decode_batches").main, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return ROW.findall(result.output)


def test_a_trained_model_at_every_bound_gives_the_same_translations(tiny_model, tiny_bpe):
    src = tiny_bpe.parent / "prepare" / "test.raw.en"
    rows = run(["-m", tiny_model, "-i", src, "--lines", "6", "--rounds", "2", "--max-tokens",
                "20,8000", "--precisions", "fp32", "--device", "cpu"])
    assert [(r[0], r[1]) for r in rows] == [("fp32", "20"), ("fp32", "8000")]
    assert all(len(r[3].split()) == 2 and float(r[2].replace(",", "")) > 0 for r in rows)
    assert rows[1][4] == "1.00"                         # the baseline, fp32@8000
    assert rows[0][6] == rows[1][6] and "/" not in rows[0][6]   # one checksum, the same


def test_random_model_needs_no_files():
    rows = run(["--random-base", "3", "--tiny", "--rounds", "1", "--max-tokens", "50,100",
                "--precisions", "fp32,bf16", "--device", "cpu", "--baseline", "bf16@100"])
    assert [(r[0], r[1]) for r in rows] == [("fp32", "50"), ("fp32", "100"), ("bf16", "50"),
                                            ("bf16", "100")]
    assert rows[3][4] == "1.00" and rows[0][5] == "-"   # no GPU memory on the CPU


def test_without_a_model_or_random_base_it_is_a_usage_error():
    result = CliRunner().invoke(load_script("decode_batches").main, ["--device", "cpu"])
    assert result.exit_code == 2 and "--random-base" in result.output

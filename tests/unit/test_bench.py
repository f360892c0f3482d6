"""``bench/schemes.py`` runs every scheme of issues 3–5 and reports ratios to abs (tiny sizes:
this checks the script, not the speed)."""

from __future__ import annotations

import json
import random

import click
import pytest
from click.testing import CliRunner

from tests.scripts import load_script


def load_bench():
    """``bench/schemes.py`` as a module (it is a script, not part of the package)."""
    return load_script("schemes")


TINY = ["--device", "cpu", "--d-model", "32", "--heads", "4", "--d-ff", "32", "--layers", "2",
        "--vocab", "50", "--src-len", "12", "--tgt-len", "10", "--batch-size", "3", "--steps", "1",
        "--rounds", "1", "--decode-len", "3"]


def run(args: list[str]) -> list[dict]:
    result = CliRunner().invoke(load_bench().main, [*TINY, *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output.splitlines()[-1])["rows"]


def test_every_scheme_is_benchmarked_against_abs():
    names = list(load_bench().SYSTEMS)
    rows = run(["--schemes", ",".join(names), "--no-memory"])
    assert [r["scheme"] for r in rows] == names
    assert rows[0]["train_ratio"] == rows[0]["decode_ratio"] == 1.0
    for r in rows:
        assert r["train_tok_s"] > 0 and r["decode_sent_s"] > 0 and r["peak_mb"] is None
    by_name = {r["scheme"]: r for r in rows}
    assert "dbsa_enc_layer=2" in by_name["dbsa-enc"]["system"]
    assert by_name["gps@all"]["system"] == "abs+gps gps_layer=all"


def test_peak_memory_grows_with_the_relative_terms():
    rows = {r["scheme"]: r for r in run(["--schemes", "abs,dep+rel"])}
    assert rows["abs"]["peak_ratio"] == 1.0 and rows["abs"]["peak_mb"] > 0
    assert rows["dep+rel"]["peak_ratio"] > 1.0            # [B, H, T, T] logits are materialised


def test_abs_must_come_first():
    result = CliRunner().invoke(load_bench().main, ["--schemes", "rel,abs"])
    assert result.exit_code == 2 and "abs must come first" in result.output


def test_real_trees_from_a_treebank(shared_data):
    """--trees: lines of whole treebank sentences (joined, sentence ids kept) of exactly
    --src-len ids; GPS paths then use the treebank's labels."""
    from depnmt.stages.parse import read_conllu
    bench = load_bench()
    treebank = list(read_conllu(shared_data / "ud" / "en_ewt-ud-test.conllu"))[:200]
    by_words = {tuple(t.words): t for t in treebank}
    rng = random.Random(0)
    joined = 0
    for _ in range(20):
        subwords, tree = bench.treebank_side(40, 0, rng, treebank)
        assert len(subwords) == 40 and len(tree) == sum(not w.endswith("@@") for w in subwords)
        assert tree.heads.count(0) == 1 and "punct" in tree.deprels
        blocks = sorted(set(tree.sent_ids))
        joined += len(blocks) > 1
        root = tree.heads.index(0) + 1
        for n, sid in enumerate(blocks):       # each block is a whole treebank sentence ...
            at = [i for i, s in enumerate(tree.sent_ids) if s == sid]
            gold = by_words[tuple(tree.words[i] for i in at)]
            for i, h in zip(at, gold.heads):   # ... its heads shifted; a later root -> the first
                expected = root if (h == 0 and n) else (h and h + at[0])
                assert tree.heads[i] == expected
    assert joined > 0
    with pytest.raises(click.UsageError, match="no sentence of the treebank"):
        bench.treebank_side(4, 0, rng, [t for t in treebank if len(t) > 4][:5])
    rows = run(["--schemes", "abs,gps", "--no-memory", "--trees",
                str(shared_data / "ud" / "en_ewt-ud-test.conllu")])
    assert [r["scheme"] for r in rows] == ["abs", "gps"]


def test_precisions_are_interleaved_and_compared_with_the_first_run():
    rows = run(["--schemes", "abs,rel", "--precision", "fp32,bf16", "--no-memory",
                "--clock", "cpu"])
    assert [(r["scheme"], r["precision"]) for r in rows] == [
        ("abs/fp32", "fp32"), ("abs/bf16", "bf16"), ("rel/fp32", "fp32"), ("rel/bf16", "bf16")]
    assert rows[0]["train_ratio"] == 1.0 and rows[1]["system"] == "abs"
    result = CliRunner().invoke(load_bench().main, [*TINY, "--precision", "fp8"])
    assert result.exit_code == 2 and "--precision" in result.output

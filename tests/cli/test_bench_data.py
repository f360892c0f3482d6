"""``bench/schemes.py --data --parsed``: every scheme on real batches of a ``depnmt bpe``
folder (as ``depnmt train`` batches them) with the trees of a ``depnmt parse`` folder."""

from __future__ import annotations

import json

from click.testing import CliRunner

from tests.cli.conftest import import_random_trees
from tests.unit.test_bench import load_bench

TINY = ["--device", "cpu", "--d-model", "32", "--heads", "4", "--d-ff", "32", "--layers", "2",
        "--steps", "2", "--rounds", "1", "--decode-len", "3", "--max-tokens", "300",
        "--no-memory", "--json"]


def test_real_batches_with_real_trees(tiny_bpe, tmp_path):
    from depnmt.data import TokenBatcher, example_lengths, load_parallel
    from depnmt.modeldir import load_vocabs
    parsed = import_random_trees(tiny_bpe, tmp_path, "parse-bench", ("en",),
                                 ["nsubj", "obj", "det"], seed=3)
    bench = load_bench()
    batches, vocab = bench.corpus_batches(tiny_bpe, parsed, 300, 2)
    src_vocab, tgt_vocab = load_vocabs(tiny_bpe)
    examples, _ = load_parallel(tiny_bpe / "train.en", tiny_bpe / "train.de", src_vocab,
                                tgt_vocab, 250, drop_long=True)
    first = TokenBatcher(example_lengths(examples), 300, seed=1).batches(1)[:2]
    assert [[ex.index for ex in b] for b in batches] == [[examples[i].index for i in b]
                                                         for b in first]   # train's batches
    assert vocab == max(len(src_vocab), len(tgt_vocab))
    assert all(ex.src_tree is not None for b in batches for ex in b)
    result = CliRunner().invoke(bench.main, [*TINY, "--data", str(tiny_bpe), "--parsed",
                                             str(parsed), "--schemes", "abs,dep+rel,gps"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output.splitlines()[-1])
    assert [r["scheme"] for r in out["rows"]] == ["abs", "dep+rel", "gps"]
    assert "real batches" in out["machine"]


def test_tree_schemes_need_the_trees_they_read(tiny_bpe):
    bench = load_bench()
    for schemes, message in (("abs,dep", "--parsed"), ("abs,dbsa-dec", "target trees")):
        result = CliRunner().invoke(bench.main, [*TINY, "--data", str(tiny_bpe),
                                                 "--schemes", schemes])
        assert result.exit_code == 2 and message in result.output, result.output
    result = CliRunner().invoke(bench.main, [*TINY, "--data", str(tiny_bpe), "--schemes", "abs,rel"])
    assert result.exit_code == 0, result.output

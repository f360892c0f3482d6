"""``bench/schemes.py --data --parsed``: every scheme on real batches of a ``depnmt bpe``
folder (as ``depnmt train`` batches them) with the trees of a ``depnmt parse`` folder; and
``bench/jobs.sh`` (one 2-thread training against two 1-thread ones) on the tiny corpus."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.cli.conftest import import_random_trees
from tests.unit.test_bench import load_bench

TINY = ["--device", "cpu", "--d-model", "32", "--heads", "4", "--d-ff", "32", "--layers", "2",
        "--steps", "2", "--rounds", "1", "--decode-len", "3", "--max-tokens", "300",
        "--no-memory", "--json"]


def test_real_batches_with_real_trees(tiny_bpe, tmp_path):
    from depnmt.data.batches import TokenBatcher, example_lengths, load_parallel
    from depnmt.storage.modeldir import load_vocabs
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


@pytest.mark.slow
def test_jobs_bench_compares_one_job_with_two(tiny_bpe, tmp_path):
    """bench/jobs.sh on the tiny corpus, one round of 7 updates: A and B each report target
    tokens/s, B/A is their ratio, and the CPU flags and loads are printed."""
    import re
    import subprocess
    script = Path(__file__).resolve().parents[2] / "bench" / "jobs.sh"
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    run = subprocess.run(["bash", str(script), str(tiny_bpe), str(tmp_path / "jobs"), "1", "7"],
                         env=env, capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.startswith("CPU flags:") and "round 1: A, load " in run.stdout
    m = re.search(r"round 1: A \(1 x 2 threads\) (\d+) tgt tok/s, B \(2 x 1 thread\) (\d+) "
                  r"summed, B/A (\d+\.\d\d)", run.stdout)
    assert m, run.stdout
    a, b, ratio = int(m[1]), int(m[2]), float(m[3])
    assert a > 0 and b > 0 and abs(ratio - b / a) < 0.02
    usage = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=False)
    assert usage.returncode == 2 and "bench/jobs.sh BPE_DIR OUT_DIR" in usage.stderr

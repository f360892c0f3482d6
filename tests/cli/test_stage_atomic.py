"""A stage's output folder is written all or nothing, by one writer (depnmt/core/stagedir.py).

Two writers of one folder: one wins, the other fails with one error line and the folder is a
single run's output. A stage killed (SIGKILL) at any moment leaves the previous complete
output, the new complete one or (between the two renames) none — never a mixture, which a
reader would take for a stage's output since the line counts match — and running it again
gives the uninterrupted run's folder byte for byte."""

from __future__ import annotations

import random
import shutil
import time
from pathlib import Path

import pytest

from depnmt.core.stagedir import COMMIT_DELAY

from .conftest import popen, run_cli, run_subprocess
from .test_chaos import chaos

observe, random_trees, leftovers, error_lines = (chaos.observe, chaos.random_trees,
                                                 chaos.leftovers, chaos.error_lines)


def stage_args(stage: str, tiny_bpe: Path, out: Path, variant: int) -> list:
    """``depnmt STAGE`` on the tiny corpus into ``out``; variants 0 and 1 write different files
    with the same line counts."""
    prep = tiny_bpe.parent / "prepare"
    if stage == "bpe":
        return ["bpe", "-i", prep, "-o", out, "--merges", ("200", "300")[variant]]
    if stage == "parse":
        given = random_trees(prep, out.parent / f"given{variant}", variant)
        return ["parse", "-i", prep, "-o", out, "--backend", "conllu", "--conllu-dir", given]
    if stage in ("multitask", "controls"):
        trees = out.parent / "trees"
        if not trees.exists():
            assert run_cli(stage_args("parse", tiny_bpe, trees, 0)) == 0
        if stage == "controls":
            return ["controls", "-i", trees, "-o", out, "--kind", "random-nonprojective",
                    "--seed", str(variant + 1)]
        return ["multitask", "-i", prep, "-t", trees, "-o", out, "--parse-fraction", "0.5",
                "--seed", str(variant + 1)]
    return ["prepare", "--src-lang", "en", "--tgt-lang", "de", "--train-src",
            prep / "train.raw.en", "--train-tgt", prep / "train.raw.de", "--dev-size", "20",
            "--test-size", "20", "-o", out, *(["--lowercase"] if variant else [])]


def test_two_bpe_writers_into_one_folder(tiny_bpe, tmp_path):
    out = tmp_path / "out"
    slow = {COMMIT_DELAY: "3"}               # the first holds the folder while the second starts
    first = popen(stage_args("bpe", tiny_bpe, out, 0), env=slow)
    time.sleep(1.0)
    second = popen(stage_args("bpe", tiny_bpe, out, 1), env=slow)
    results = [(proc.pid, proc.wait(120), proc.communicate()[1]) for proc in (first, second)]
    assert sorted(code == 0 for _, code, _ in results) == [False, True], results
    (winner, _, _), = [r for r in results if r[1] == 0]
    (_, code, stderr), = [r for r in results if r[1] != 0]
    assert code == 2 and "Traceback" not in stderr
    errors = error_lines(stderr)
    assert errors == [f"error: {out}: in use by process {winner} (another `depnmt bpe` writes "
                      f"this folder)"], stderr
    alone = tmp_path / "alone"
    assert run_subprocess(stage_args("bpe", tiny_bpe, alone, winner == second.pid)
                          ).returncode == 0
    assert observe(out) == observe(alone)
    assert leftovers(out) == []


@pytest.mark.parametrize("stage", ["prepare", "bpe", "parse", "controls"])
def test_killed_stage_leaves_a_complete_folder_or_none(stage, tiny_bpe, tmp_path):
    out, alone = tmp_path / "out", tmp_path / "alone"
    assert run_subprocess(stage_args(stage, tiny_bpe, out, 0)).returncode == 0
    assert run_subprocess(stage_args(stage, tiny_bpe, alone, 1)).returncode == 0
    complete = [None, observe(out), observe(alone)]
    rng = random.Random(0)
    for delay in (0.3, 0.6, 0.9, 1.2, 1.5, 2.0):
        proc = popen(stage_args(stage, tiny_bpe, out, 1))
        stop = time.monotonic() + delay + rng.uniform(0, 0.1)
        while time.monotonic() < stop and proc.poll() is None:
            seen = observe(out)
            assert seen == "gone" or seen in complete, f"a mixed folder after {delay}s"
        proc.kill()
        proc.wait()
        assert observe(out) in complete
    assert run_subprocess(stage_args(stage, tiny_bpe, out, 1)).returncode == 0
    assert observe(out) == observe(alone)
    assert leftovers(out) == []


def test_a_folder_holding_other_files_is_refused_untouched(tiny_bpe, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    assert run_cli(stage_args("bpe", tiny_bpe, out, 0)) == 2
    assert error_lines(capsys.readouterr().err) == [
        f"error: {out}: holds files that are not `depnmt bpe` output (notes.txt); the folder is "
        f"replaced as a whole: move them away or choose another output folder"]
    assert observe(out) == {"notes.txt": b"mine\n"} and leftovers(out) == []


def test_another_stages_folder_is_refused(tiny_bpe, tmp_path, capsys):
    out = tmp_path / "out"
    assert run_cli(stage_args("bpe", tiny_bpe, out, 0)) == 0
    before = observe(out)
    assert run_cli(stage_args("prepare", tiny_bpe, out, 0)) == 2
    assert "are not `depnmt prepare` output" in capsys.readouterr().err
    assert observe(out) == before


def test_a_stage_replaces_its_own_output(tiny_bpe, tmp_path):
    """Re-running a stage into its folder replaces it, as before (files of the old run that
    the new one does not write go too: separate codes after joint ones)."""
    out = tmp_path / "out"
    assert run_cli(stage_args("bpe", tiny_bpe, out, 0)) == 0
    assert run_cli([*stage_args("bpe", tiny_bpe, out, 1), "--separate"]) == 0
    names = set(observe(out))
    assert {"codes.src", "codes.tgt"} <= names and "codes.joint" not in names


def test_a_folder_being_written_is_not_read_as_a_stages_output(tiny_bpe, tmp_path, capsys):
    """While a run writes (or after it was killed) the folder is absent and its temporary
    folder lies beside it; readers say so. A manifest listing no outputs is incomplete."""
    out = tmp_path / "out"
    (tmp_path / ".out.tmp-12345").mkdir()
    assert run_cli(["bpe", "-i", out, "-o", tmp_path / "bpe"]) == 2
    assert error_lines(capsys.readouterr().err) == [
        f"error: {out}: no manifest.json found; run `depnmt prepare` to create this folder "
        f"first (a `depnmt prepare` run is writing it, or was interrupted; the folder appears "
        f"when the run completes)"]
    out.mkdir()
    (out / "manifest.json").write_text('{"stage": "prepare"}\n')
    assert run_cli(["bpe", "-i", out, "-o", tmp_path / "bpe"]) == 2
    assert error_lines(capsys.readouterr().err) == [
        f"error: {out}/manifest.json: incomplete (it lists no outputs); re-run `depnmt prepare`"]


def test_multitask_into_its_own_input_is_refused(tiny_bpe, tmp_path, capsys):
    """Its output replaces the folder as a whole: it cannot be the prepare folder it reads."""
    prep = tmp_path / "prepare"
    shutil.copytree(tiny_bpe.parent / "prepare", prep)
    before = observe(prep)
    args = stage_args("multitask", tiny_bpe, tmp_path / "out", 0)
    args[args.index("-i") + 1] = args[args.index("-o") + 1] = prep
    assert run_cli(args) == 2
    assert error_lines(capsys.readouterr().err) == [
        f"error: {prep}: the output folder must differ from the prepare folder"]
    assert observe(prep) == before


@pytest.mark.slow
def test_two_exports_into_one_folder(tiny_model, tmp_path):
    """The second export fails at once instead of deleting the first one's temporary folder."""
    pytest.importorskip("ctranslate2")
    out = tmp_path / "ct2"
    first = popen(["export", "-m", tiny_model, "-o", out], env={COMMIT_DELAY: "4"})
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob(".ct2.*tmp*")) and time.monotonic() < deadline:
        time.sleep(0.05)                     # the first one writes
    second = run_subprocess(["export", "-m", tiny_model, "-o", out, "--force"])
    assert first.wait(120) == 0, first.communicate()[1]
    assert second.returncode == 2 and error_lines(second.stderr) == [
        f"error: {out}: in use by process {first.pid} (another `depnmt export` writes this "
        f"folder)"], second.stderr
    assert (out / "model.bin").exists() and (out / "depnmt-export.json").exists()
    assert leftovers(out) == []


def test_the_current_folder_as_the_output(tiny_bpe, tmp_path):
    """``-o .`` names the current folder: written there like any other output folder, not
    refused for a lock file the stage itself made (``..lock``); ``-o ''`` (an unset shell
    variable) is a usage error, not the current folder."""
    here = tmp_path / "here"
    here.mkdir()
    proc = run_subprocess(stage_args("bpe", tiny_bpe, Path("."), 0), cwd=here)
    assert proc.returncode == 0, proc.stderr
    assert (here / "manifest.json").is_file() and not (here / "..lock").exists()
    assert run_subprocess(stage_args("bpe", tiny_bpe, Path("."), 1), cwd=here).returncode == 0
    proc = run_subprocess(stage_args("bpe", tiny_bpe, "", 1), cwd=here)
    assert proc.returncode == 2 and "an empty path" in proc.stderr
    (here / "notes.txt").write_text("mine\n")
    proc = run_subprocess(stage_args("bpe", tiny_bpe, Path("."), 0), cwd=here)
    assert proc.returncode == 2
    assert error_lines(proc.stderr) == [
        f"error: {here}: holds files that are not `depnmt bpe` output (notes.txt); the folder "
        f"is replaced as a whole: move them away or choose another output folder"]
    assert leftovers(here) == []

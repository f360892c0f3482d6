"""A finished model and its hypotheses are reused only when made with the settings given now:
`depnmt train --check-settings` (the flags against the model's config.json) and the comparison
recipes, which skip what is done (recipes/lib/compare.sh: run_system) — a re-run with another
STEPS or BEAM into the same work folder stops with one line naming the setting instead of
reporting the old setting's numbers as the new one's."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from depnmt import train_model
from depnmt.core.errors import DepnmtError
from tests.cli.conftest import TINY_MODEL, overriding, run_cli

REPO = Path(__file__).resolve().parents[2]
COMPARE = REPO / "recipes" / "multi30k-en-de" / "compare.sh"
TINY_ARCH = "--layers 1 --d-model 32 --heads 2 --d-ff 64"


def test_check_settings_names_each_setting_that_differs(tiny_model, tiny_bpe, tmp_path, capsys):
    """The flags `tiny_model` was trained with pass (``--lr 3e-3`` is its 0.003; the device is
    not compared); others are one line naming each, both values and what to do, exit 2, and
    nothing is trained or written; through the API as through the command."""
    same = ["train", "-i", tiny_bpe, "-o", tiny_model, *TINY_MODEL, "--max-steps", "12",
            "--valid-every", "6", "--check-settings"]
    config = (tiny_model / "config.json").read_bytes()
    assert run_cli(same) == 0
    assert f"{tiny_model}: trained with the settings given" in capsys.readouterr().err
    other = overriding(same, "--layers", "2", "--lr", "1e-3", "--device", "auto")
    assert run_cli(other) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: {tiny_model}: trained with --encoder-layers 1, not 2; --decoder-layers 1, not 2; "
        f"--lr 0.003, not 0.001: give other settings another model folder (a recipe: another "
        f"work folder, DEPNMT_WORK), or remove {tiny_model} and what was made from it to train "
        f"it again")
    assert (tiny_model / "config.json").read_bytes() == config
    assert run_cli(["train", "-i", tiny_bpe, "-o", tmp_path / "none", "--check-settings"]) == 2
    assert "holds no trained model" in capsys.readouterr().err
    assert not (tmp_path / "none").exists()

    api = {"input": str(tiny_bpe), "output": str(tiny_model), "max-steps": 12,
           "check-settings": True}
    assert train_model(api) == tiny_model
    with pytest.raises(DepnmtError, match="trained with --max-steps 12, not 24: "):
        train_model({**api, "max-steps": 24})
    assert (tiny_model / "config.json").read_bytes() == config


def run_compare(work: Path, **settings: str) -> subprocess.CompletedProcess:
    """The Multi30k comparison recipe on the tiny corpus in ``work``: system abs, a tiny model,
    STEPS=4 (greedy, best.pt), unless ``settings`` say otherwise."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("SEED", "SEEDS", "BEAM", "ALPHA", "AVERAGE", "JOBS", "TRAIN_LAUNCH",
                        "ARCHIVE", "MAX_EPOCHS")}
    env.update({"DEPNMT_NO_PROGRESS": "1", "OMP_NUM_THREADS": "1", "DEPNMT_WORK": str(work),
                "SYSTEMS": "abs", "STEPS": "4", "ARCH": TINY_ARCH, **settings})
    return subprocess.run(["bash", str(COMPARE)], env=env, capture_output=True, text=True,
                          timeout=600, check=False)


@pytest.fixture(scope="module")
def campaign(tiny_bpe, tmp_path_factory) -> Path:
    """A work folder in which the recipe ran once with STEPS=4 (trained, translated, scored)."""
    work = tmp_path_factory.mktemp("recipe") / "work"
    work.mkdir()
    for stage in ("prepare", "bpe"):
        (work / stage).symlink_to(tiny_bpe.parent / stage, target_is_directory=True)
    done = run_compare(work)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "abs (seed 1): train" in done.stdout and "abs (seed 1): translate" in done.stdout
    return work


def stamps(work: Path) -> dict[str, int]:
    """The modification times of every file of the campaign's results folder."""
    return {str(p.relative_to(work)): p.stat().st_mtime_ns
            for p in sorted((work / "compare").rglob("*")) if p.is_file()
            and p.parent.name != "compare"}                     # (results.* are written again)


@pytest.mark.slow
def test_a_rerun_with_another_budget_is_refused(campaign):
    """The same settings again (α written 0.60 for 0.6): everything skipped (nothing trained,
    translated or scored again); STEPS=8: one line naming the model folder and each budget
    flag, exit 2, before anything is made."""
    before = stamps(campaign)
    again = run_compare(campaign, ALPHA="0.60")
    assert again.returncode == 0, again.stderr[-2000:]
    assert ": train" not in again.stdout and ": translate" not in again.stdout
    assert "test likelihood" not in again.stdout and stamps(campaign) == before
    model = campaign / "compare" / "models" / "abs"
    other = run_compare(campaign, STEPS="8")
    assert other.returncode == 2 and ": train" not in other.stdout
    errors = [line for line in other.stderr.splitlines() if line.startswith("error:")]
    assert errors == [(f"error: {model}: trained with --warmup 2, not 4; --max-steps 4, not 8; "
                       f"--valid-every 4, not 8: give other settings another model folder (a "
                       f"recipe: another work folder, DEPNMT_WORK), or remove {model} and what "
                       f"was made from it to train it again")]
    assert stamps(campaign) == before


@pytest.mark.slow
def test_a_rerun_with_another_beam_is_refused(campaign, tmp_path):
    """BEAM=2 on hypotheses made greedily: one line naming them, the beam and both values,
    exit 2; removed as it says, they are made again with beam 2 (and the test likelihood with
    them) and recorded so."""
    work = tmp_path / "work"                    # a copy: the campaign stays greedy
    shutil.copytree(campaign, work, symlinks=True)
    hyps = work / "compare" / "hyps"
    hyp = hyps / "abs.de"
    before = stamps(work)
    other = run_compare(work, BEAM="2")
    assert other.returncode == 2 and ": translate" not in other.stdout
    errors = [line for line in other.stderr.splitlines() if line.startswith("error:")]
    assert errors == [(f"error: {hyp} was made with beam 1, not 2: give another setting "
                       f"another work folder (DEPNMT_WORK), or remove {hyp} and {hyp}.* to "
                       f"translate again")]
    assert stamps(work) == before
    for path in hyps.glob("abs.de*"):
        path.unlink()
    remade = run_compare(work, BEAM="2")
    assert remade.returncode == 0, remade.stderr[-2000:]
    assert ": train" not in remade.stdout and "abs (seed 1): translate" in remade.stdout
    assert "test likelihood" in remade.stdout and (hyps / "abs.de.ref-logprob").exists()
    record = json.loads((hyps / "abs.de.settings").read_text())["options"]
    assert (record["beam"], record["alpha"], record["checkpoint"]) == ("2", "0.6", "best")
    # and the files it wrote, which `depnmt report` checks against the record
    assert [record["hypotheses"], record["likelihood"]] == [
        hashlib.sha256((hyps / name).read_bytes()).hexdigest()[:16]
        for name in ("abs.de", "abs.de.ref-logprob")]

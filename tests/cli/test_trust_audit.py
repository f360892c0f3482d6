"""Results that must not be silently stale: an average whose snapshots changed or were trained
past since it was made, and a run that a process is training, taken for a finished one by
`archive` and `report -f`."""

from __future__ import annotations

import fcntl
import os
import shutil

import pytest

from depnmt.api import Translator
from depnmt.core.errors import DepnmtError
from depnmt.storage.checkpoint import load_checkpoint, save_checkpoint

from .conftest import TINY_MODEL, copy_run, run_cli
from .test_report import write_hyps


@pytest.fixture(scope="module")
def snapshots_model(tmp_path_factory, tiny_bpe):
    """12 updates, validated every 3, the last 2 snapshots (step9.pt, step12.pt) kept."""
    model = tmp_path_factory.mktemp("audit") / "m"
    assert run_cli(["train", "-i", tiny_bpe, "-o", model, *TINY_MODEL, "--max-steps", "12",
                    "--valid-every", "3", "--keep-last", "2"]) == 0
    return model


def averaged(snapshots_model, tmp_path, capsys, *how: str):
    """A copy of the model with `depnmt average HOW -o avg`."""
    model = tmp_path / "m"
    shutil.copytree(snapshots_model, model)
    assert run_cli(["average", "-m", model, *how, "-o", "avg"]) == 0
    capsys.readouterr()
    return model


def test_an_average_whose_snapshot_holds_other_weights_is_refused(snapshots_model, tiny_bpe,
                                                                    tmp_path, capsys):
    model = averaged(snapshots_model, tmp_path, capsys, "--last", "2")
    ckpt, src = model / "checkpoints", tiny_bpe.parent / "prepare" / "test.raw.en"
    sources = load_checkpoint(ckpt / "avg.pt")["averaged_sources"]
    assert [(s["name"], s["step"]) for s in sources] == [("step9.pt", 9), ("step12.pt", 12)]
    assert run_cli(["translate", "-m", model, "-i", src, "--beam", "1", "--checkpoint",
                    "avg"]) == 0
    assert "warning" not in capsys.readouterr().err

    step12 = load_checkpoint(ckpt / "step12.pt")        # written again by an exact resume:
    step12["progress"]["elapsed"] += 1.0                # the same weights, another time
    save_checkpoint(ckpt / "step12.pt", step12)
    assert run_cli(["translate", "-m", model, "-i", src, "--beam", "1", "--checkpoint",
                    "avg"]) == 0
    assert "error" not in capsys.readouterr().err

    step12["model"] = load_checkpoint(ckpt / "step9.pt")["model"]     # written again otherwise
    save_checkpoint(ckpt / "step12.pt", step12)
    for command in (["translate", "-i", src], ["rescore", "--src", src, "--tgt", src]):
        assert run_cli([command[0], "-m", model, *command[1:], "--checkpoint", "avg"]) == 2
        err = capsys.readouterr().err
        assert f"error: {ckpt / 'avg.pt'}: an average of step12.pt (update 12), which holds " \
               f"other weights now" in err and "depnmt average` again" in err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    with pytest.raises(DepnmtError, match="an average of step12.pt"):
        Translator.load(model, "avg", device="cpu")
    assert run_cli(["average", "-m", model, "--last", "2", "-o", "avg"]) == 0   # made again
    assert run_cli(["translate", "-m", model, "-i", src, "--beam", "1", "--checkpoint",
                    "avg"]) == 0


def test_an_average_warns_when_the_run_trained_on(snapshots_model, tiny_bpe, tmp_path, capsys):
    model = averaged(snapshots_model, tmp_path, capsys, "--best", "1")
    src = tiny_bpe.parent / "prepare" / "test.raw.en"
    assert run_cli(["translate", "-m", model, "-i", src, "--beam", "1", "--checkpoint",
                    "avg"]) == 0
    assert "warning" not in capsys.readouterr().err     # snapshots newer than the best: not news
    assert run_cli(["train", "-i", tiny_bpe, "-o", model, "--resume", "--max-steps", "15"]) == 0
    capsys.readouterr()
    chosen = load_checkpoint(model / "checkpoints" / "avg.pt")["averaged_sources"][0]["step"]
    assert run_cli(["translate", "-m", model, "-i", src, "--beam", "1", "--checkpoint",
                    "avg"]) == 0
    err = capsys.readouterr().err
    assert f"avg.pt: the average of updates {chosen}; the run has trained to update 15 " \
           f"since (step15.pt)" in err


def results_folder(tiny_model, tiny_bpe, root):
    """A results folder of the recipes' layout with two finished runs, `abs` and `rel`."""
    _, good, bad = write_hyps(tiny_bpe, root)
    folder = root / "compare"
    (folder / "hyps").mkdir(parents=True)
    for name, hyp in (("abs", good), ("rel", bad)):
        copy_run(tiny_model, folder / "models" / name)
        shutil.copy(hyp, folder / "hyps" / f"{name}.de")
    return folder


def test_archive_and_report_skip_a_run_being_trained(tiny_model, tiny_bpe, tmp_path, capsys):
    """A finished run resumed to train on keeps its manifest.json while its log changes."""
    folder = results_folder(tiny_model, tiny_bpe, tmp_path)
    ref = tiny_bpe.parent / "prepare" / "test.raw.de"
    holder = os.open(folder / "models" / "rel" / ".lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)            # as a running trainer holds it
    capsys.readouterr()
    try:
        assert run_cli(["archive", folder, "-o", tmp_path / "archive"]) == 0
        archive_err = capsys.readouterr().err
        assert run_cli(["report", "--ref", ref, "-f", folder, "--bootstrap", "0",
                        "--shuffles", "0"]) == 0
        report = capsys.readouterr()
        # named with -s, a run in training is refused (with -f it is skipped, above)
        assert run_cli(["report", "--ref", ref, "--bootstrap", "0", "--shuffles", "0", "-s",
                        "rel", folder / "models" / "rel", folder / "hyps" / "rel.de"]) == 2
        refused = capsys.readouterr().err
    finally:
        os.close(holder)
    assert refused.startswith("error: system 'rel': ") and f"process {os.getpid()}" in refused
    skipped = f"models/rel: skipped (training, process {os.getpid()}"
    assert skipped in archive_err and "archived 1 run(s)" in archive_err
    assert not (tmp_path / "archive" / "compare" / "models" / "rel").exists()
    assert skipped in report.err
    assert "| abs |" in report.out and "| rel |" not in report.out
    assert run_cli(["archive", folder, "-o", tmp_path / "archive"]) == 0    # training ended
    assert "archived 2 run(s)" in capsys.readouterr().err

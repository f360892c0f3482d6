"""One writer per folder beyond the stages: two `depnmt archive` into one OUT (campaign jobs
archiving their seeds), or two `depnmt average` into one NAME, run one after the other — the
second waits for the first's lock, both succeed, and the result is that of running them in
sequence."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from depnmt.storage.checkpoint import load_checkpoint
from depnmt.storage.modeldir import lock_for_writing

from .conftest import TINY_MODEL, popen, run_cli
from .test_archive import campaign

HOLD = 4.0          # seconds the first writer waits, holding its lock


def wait_for_holder(lock: Path, pid: int, timeout: float = 60.0) -> None:
    """Wait until process ``pid`` holds ``lock`` (it writes its PID there once it does)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if lock.exists() and lock.read_text().strip() == str(pid):
            return
        time.sleep(0.05)
    pytest.fail(f"process {pid} never took {lock}")


def both_succeed(first_args: list, first_env: dict, second_args: list, lock: Path) -> None:
    """Start ``depnmt FIRST_ARGS``; once it holds ``lock``, start ``SECOND_ARGS`` (which alone
    takes less than the first's ``HOLD``); both must succeed."""
    first = popen(first_args, env=first_env)
    wait_for_holder(lock, first.pid)
    second = popen(second_args)
    for proc in (first, second):
        err = proc.communicate(timeout=120)[1]
        assert proc.returncode == 0, err


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def test_two_archives_into_one_folder_wait_for_each_other(tiny_model, tiny_bpe, tmp_path):
    _, folders = campaign(tiny_model, tiny_bpe, tmp_path)
    out, sequential = tmp_path / "results", tmp_path / "sequential"
    both_succeed(["archive", folders[0], "-o", out], {"DEPNMT_STAGE_COMMIT_DELAY": str(HOLD)},
                 ["archive", folders[1], "-o", out], tmp_path / ".results.lock")
    first, second = ([p.stat().st_mtime_ns for p in (out / f.name).rglob("*") if p.is_file()]
                     for f in folders)
    assert min(second) >= max(first), "the second archive wrote while the first did"
    for folder in folders:
        assert run_cli(["archive", folder, "-o", sequential]) == 0
    assert tree(out) == tree(sequential) and len(tree(out)) == 17


@pytest.fixture(scope="module")
def snapshots_model(tmp_path_factory, tiny_bpe) -> Path:
    model = tmp_path_factory.mktemp("locks") / "m"
    assert run_cli(["train", "-i", tiny_bpe, "-o", model, *TINY_MODEL, "--max-steps", "4",
                    "--valid-every", "2", "--keep-last", "2"]) == 0
    return model


@pytest.mark.slow
def test_two_averages_into_one_name_wait_for_each_other(snapshots_model):
    ckpt = snapshots_model / "checkpoints"
    both_succeed(["average", "-m", snapshots_model, "--last", "2", "-o", "avg"],
                 {"DEPNMT_CHECKPOINT_WRITE_DELAY": str(HOLD)},
                 ["average", "-m", snapshots_model, "--last", "1", "-o", "avg"],
                 ckpt / ".avg.pt.lock")
    # the second wrote after the first (not while the first was writing): its average stays
    assert load_checkpoint(ckpt / "avg.pt")["averaged_from"] == ["step4.pt"]


def test_average_while_the_model_trains(snapshots_model):
    with lock_for_writing(snapshots_model):                 # what a training holds
        assert run_cli(["average", "-m", snapshots_model, "--last", "2", "-o", "during"]) == 0
    assert load_checkpoint(snapshots_model / "checkpoints" / "during.pt")["averaged_from"] == \
        ["step2.pt", "step4.pt"]

"""Trust audit of ``depnmt train`` under torchrun (2 gloo processes on the CPU).

On several machines without a shared file system every process reads ``-i`` and, on
``--resume``, ``checkpoints/last.pt`` from its own copy; the tests simulate that on one machine
by starting each rank in a working directory of its own (``rank0/``, ``rank1/``) with relative
paths. A rank whose copy differs from rank 0's is refused (before: it trained on other pairs,
or from another update with other optimizer moments, and the run exited 0). A resume with
another number of processes says what changes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from depnmt.storage.checkpoint import load_checkpoint

from .conftest import overriding, run_cli
from .test_distributed import COMMON, free_port, pytestmark  # noqa: F401 (pytestmark: gloo)

# each rank in the folder PREFIX + RANK (as if on a machine of its own), then `depnmt ARGS`
IN_OWN_FOLDER = textwrap.dedent("""
    import os, runpy, sys
    os.chdir(sys.argv[1] + os.environ["RANK"])
    sys.argv = ["depnmt", *sys.argv[2:]]
    runpy.run_module("depnmt.cli", run_name="__main__")
""")


def torchrun_in_own_folders(root: Path, args: list) -> subprocess.CompletedProcess:
    """``depnmt ARGS`` in 2 torchrun processes, rank r in ``root/rank{r}``."""
    script = root / "in_own_folder.py"
    script.write_text(IN_OWN_FOLDER, encoding="utf-8")
    env = {**os.environ, "DEPNMT_NO_PROGRESS": "1", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
           "--master_addr", "127.0.0.1", "--master_port", str(free_port()), str(script),
           f"{root}/rank", *map(str, args)]
    return subprocess.run(cmd, check=False, env=env, capture_output=True, text=True,
                          timeout=600)


def step_of(model: Path) -> int:
    return load_checkpoint(model / "checkpoints" / "last.pt")["progress"]["step"]


@pytest.mark.slow
def test_a_rank_resuming_from_a_stale_copy_of_last_pt_is_refused(tiny_bpe, tmp_path):
    """Rank 1's model folder is a copy made at update 2, rank 0's went on to update 3: the
    resumed run stops on every rank, naming both updates, and writes nothing."""
    ours, theirs = tmp_path / "rank0" / "model", tmp_path / "rank1" / "model"
    train = ["train", "-i", tiny_bpe, *COMMON]
    assert run_cli([*overriding(train, "--max-steps", "2"), "-o", ours]) == 0
    shutil.copytree(ours, theirs)
    assert run_cli([*overriding(train, "--max-steps", "3"), "-o", ours, "--resume"]) == 0
    proc = torchrun_in_own_folders(tmp_path, [*overriding(train, "--max-steps", "5"), "-o",
                                              "model", "--resume"])
    assert proc.returncode != 0
    assert ("error: model/checkpoints/last.pt: rank 1 (on " in proc.stderr
            and ") holds update 2 (epoch 1, batch 2), rank 0 update 3 (epoch 1, batch 3): every "
                "process must resume from the same checkpoint" in proc.stderr), proc.stderr
    assert step_of(ours) == 3


@pytest.mark.slow
def test_a_rank_on_other_training_pairs_is_refused(tiny_bpe, tmp_path):
    """Rank 1's -i has two target words of one pair swapped (same lengths, so the same batch
    plan, and the same line counts its manifest records): refused, nothing trained."""
    for r in (0, 1):
        shutil.copytree(tiny_bpe, tmp_path / f"rank{r}" / "bpe")
    train_de = tmp_path / "rank1" / "bpe" / "train.de"
    lines = train_de.read_text(encoding="utf-8").splitlines(keepends=True)
    words = lines[0].split()
    assert words[0] != words[1]
    lines[0] = " ".join([words[1], words[0], *words[2:]]) + "\n"
    train_de.write_text("".join(lines), encoding="utf-8")
    proc = torchrun_in_own_folders(tmp_path, ["train", "-i", "bpe", "-o", "model", *COMMON])
    assert proc.returncode != 0
    assert ("bpe/train.de: rank 1 (on " in proc.stderr
            and "reads other contents than rank 0: every process must train on the same data"
            in proc.stderr), proc.stderr
    assert not (tmp_path / "rank0" / "model" / "checkpoints" / "last.pt").exists()


@pytest.mark.slow
def test_resuming_with_another_number_of_processes_says_what_changes(tiny_bpe, tmp_path):
    """1 process saved after update 3 (batch 3 of an epoch of 94); 2 resume: an update now
    takes 2 batches, and the rest of epoch 1 (91 batches) leaves one out, which the epoch's
    warning (94 = 47 updates of 2: nothing left out) does not say."""
    model = tmp_path / "rank0" / "model"
    train = ["train", "-i", tiny_bpe, *COMMON]
    assert run_cli([*overriding(train, "--max-steps", "3"), "-o", model]) == 0
    shutil.copytree(model, tmp_path / "rank1" / "model")     # --resume reads it on each
    proc = torchrun_in_own_folders(tmp_path, [*overriding(train, "--max-steps", "4"), "-o",
                                              "model", "--resume"])
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert ("warning: resumed with 2 process(es), last.pt was saved by 1: an update now "
            "takes 2 batches (--update-freq 1 × 2), not 1" in proc.stderr)
    assert ("warning: epoch 1 resumes at batch 3 of 94: its remaining 91 batches make 45 "
            "updates of 2, and the last 1 is left out of this epoch" in proc.stderr)
    assert "each epoch's" not in proc.stderr            # no whole epoch leaves anything out
    progress = load_checkpoint(model / "checkpoints" / "last.pt")["progress"]
    assert (progress["step"], progress["batches_done"]) == (4, 5)

"""``depnmt train`` under torchrun: 2 gloo processes on the CPU train like one process with twice
the ``--update-freq`` (same total batch), and only rank 0 writes."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from depnmt.storage.checkpoint import load_checkpoint

from .conftest import TINY_MODEL, overriding, run_cli

pytestmark = pytest.mark.skipif(
    not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
    reason="torch.distributed with gloo is not available")

# dropout 0: the ranks' random streams differ from the single process's by design
COMMON = overriding(TINY_MODEL, "--dropout", "0", "--max-tokens", "150", "--max-steps", "4",
                    "--valid-every", "0", "--device", "cpu")
LR = float(TINY_MODEL[TINY_MODEL.index("--lr") + 1])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(args: list, nproc: int = 2) -> subprocess.CompletedProcess:
    """``torchrun --nproc_per_node NPROC -m depnmt.cli ARGS`` on this machine's loopback."""
    env = {**os.environ, "DEPNMT_NO_PROGRESS": "1", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
           "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
           "-m", "depnmt.cli", *map(str, args)]
    return subprocess.run(cmd, check=False, env=env, capture_output=True, text=True, timeout=600)


def metrics(model: Path) -> list[dict]:
    return [json.loads(line) for line in (model / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_two_processes_train_like_one_with_double_update_freq(tiny_bpe, tmp_path):
    two, one = tmp_path / "two", tmp_path / "one"
    proc = torchrun(["train", "-i", tiny_bpe, "-o", two, *COMMON, "--workers", "1"])
    assert proc.returncode == 0, proc.stderr[-4000:]      # each rank's batches from a worker
    assert run_cli(["train", "-i", tiny_bpe, "-o", one, *COMMON, "--update-freq", "2",
                    "--workers", "0"]) == 0

    a, b = (load_checkpoint(m / "checkpoints" / "last.pt") for m in (two, one))
    for key in ("step", "epoch", "batches_done"):
        assert a["progress"][key] == b["progress"][key], key
    assert a["progress"]["step"] == 4
    assert a["model"].keys() == b["model"].keys()
    for name in b["model"]:
        # In this abs model a key bias has zero gradient in exact arithmetic (q·(k_j + b) - q·k_j
        # is the same for every key j, and softmax is shift-invariant), so Adam turns the
        # round-off of the two reduction orders into steps of up to lr: bound it by 4 updates
        # at the peak lr.
        atol = 4 * LR if name.endswith("k_proj.bias") else 1e-5
        assert torch.allclose(a["model"][name], b["model"][name], atol=atol), name
    assert len(a["rng_ranks"]) == 2 and "rng_ranks" not in b

    # one writer: every event once, the logged loss and token counts those of the whole update
    ma, mb = metrics(two), metrics(one)
    assert [m["event"] for m in ma] == [m["event"] for m in mb] == \
        ["start", "train", "train", "valid", "end"]
    assert ma[0]["processes"] == 2 and mb[0]["processes"] == 1
    for x, y in zip(ma[1:3], mb[1:3]):
        assert x["step"] == y["step"] and x["loss"] == pytest.approx(y["loss"], abs=2e-4)
    assert ma[3]["dev_nll"] == pytest.approx(mb[3]["dev_nll"], abs=1e-3)
    assert proc.stderr.count("training abs on cpu × 2 processes") == 1


@pytest.mark.slow
def test_resume_under_torchrun_restores_every_rank(tiny_bpe, tmp_path):
    """With dropout, 4 updates in one go == 2, stop, --resume to 4: each rank gets back its own
    random stream (and data position, optimizer, schedule)."""
    straight, split = tmp_path / "straight", tmp_path / "split"
    common = ["train", "-i", tiny_bpe, *overriding(COMMON, "--dropout", "0.1")]
    for model, extra in ((straight, []), (split, ["--max-steps", "2"]),
                         (split, ["--max-steps", "4", "--resume"])):
        proc = torchrun([*overriding(common, *extra), "-o", model])
        assert proc.returncode == 0, proc.stderr[-4000:]
    a, b = (load_checkpoint(m / "checkpoints" / "last.pt") for m in (straight, split))
    assert b["progress"]["step"] == 4
    for name in a["model"]:
        assert torch.equal(a["model"][name], b["model"][name]), name

"""Model files run nothing and are verified; training survives kills and signals exactly; one
writer per model directory (issue 10). The long version: ``bench/kill_resume.py``."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from depnmt.storage.checkpoint import load_checkpoint

from .conftest import TINY_MODEL, overriding, popen, run_cli

# 10 updates, a log record and a checkpoint after each (a kill during a write then finds the
# step's record logged), validation at 5 and 10 (tiny: a few seconds)
STEPS = 10
RUN = overriding(TINY_MODEL, "--max-tokens", "150", "--valid-every", "5", "--save-every", "1",
                 "--log-every", "1", "--max-steps", str(STEPS))


def metrics(model: Path) -> list[dict]:
    return [json.loads(l) for l in (model / "metrics.jsonl").read_text().splitlines()]


def logged_steps(model: Path) -> list[tuple[str, int]]:
    """(event, step) of the train and valid records: each step's once, in order."""
    return [(m["event"], m["step"]) for m in metrics(model) if m["event"] in ("train", "valid")]


def leftovers(model: Path) -> list[Path]:
    return [p for p in model.rglob("*.tmp")]


def assert_same_weights(a: Path, b: Path) -> None:
    x, y = (load_checkpoint(m / "checkpoints" / "last.pt")["model"] for m in (a, b))
    assert x.keys() == y.keys()
    for name in x:
        assert torch.equal(x[name], y[name]), name


def wait_for(predicate, timeout: float = 120.0) -> None:
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            raise AssertionError("timed out")
        time.sleep(0.02)


@pytest.fixture(scope="module")
def straight(tiny_bpe, tmp_path_factory) -> Path:
    """The uninterrupted run every interrupted one must end identical to."""
    model = tmp_path_factory.mktemp("straight") / "m"
    assert run_cli(["train", "-i", tiny_bpe, "-o", model, *RUN]) == 0
    return model


# -- model files ---------------------------------------------------------------------------
class Payload:
    """Unpickling this runs ``touch MARKER`` (how a hostile model file runs code)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def hostile_checkpoint(path: Path, marker: Path, like: Path) -> None:
    state = load_checkpoint(like)
    state["progress"]["history"].append(Payload(marker))
    torch.save(state, path)


def test_hostile_pickle_runs_nothing(tiny_model, tiny_bpe, tmp_path, capsys):
    marker = tmp_path / "PWNED"
    evil = tmp_path / "evil.pt"
    hostile_checkpoint(evil, marker, tiny_model / "checkpoints" / "best.pt")
    src = tmp_path / "in.txt"
    src.write_text("A man.\n")
    assert run_cli(["translate", "-m", tiny_model, "-c", evil, "-i", src]) == 2
    err = capsys.readouterr().err
    assert f"error: {evil}: not a depnmt checkpoint (it holds posix.system" in err
    assert err.count("\n") == 1
    # the same through `train --resume` (its last.pt replaced)
    model = tmp_path / "m"
    shutil.copytree(tiny_model, model)
    hostile_checkpoint(model / "checkpoints" / "last.pt", marker,
                       tiny_model / "checkpoints" / "last.pt")
    assert run_cli(["train", "-i", tiny_bpe, "-o", model, "--resume", "--max-steps", "20"]) == 2
    err = capsys.readouterr().err
    assert f"{model / 'checkpoints' / 'last.pt'}: not a depnmt checkpoint" in err
    assert not marker.exists()


def test_corrupted_checkpoint_is_an_error(tiny_model, tmp_path, capsys):
    model = tmp_path / "m"
    shutil.copytree(tiny_model, model)
    best = model / "checkpoints" / "best.pt"
    data = bytearray(best.read_bytes())
    middle = len(data) // 2
    data[middle - 2048:middle + 2048] = bytes(4096)
    best.write_bytes(data)
    src = tmp_path / "in.txt"
    src.write_text("A man.\n")
    assert run_cli(["translate", "-m", model, "-i", src]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {best}: ") and err.count("\n") == 1


def test_checkpoint_without_digest_still_loads(tiny_model, tmp_path, capsys):
    """Checkpoints of this format written before digests existed: a warning, then translate."""
    model = tmp_path / "m"
    shutil.copytree(tiny_model, model)
    best = model / "checkpoints" / "best.pt"
    torch.save(load_checkpoint(best), best)        # torch.save as the earlier depnmt did
    src = tmp_path / "in.txt"
    src.write_text("A man is riding a bike.\n")
    assert run_cli(["translate", "-m", model, "-i", src]) == 0
    out = capsys.readouterr()
    assert "no SHA-256 recorded" in out.err and len(out.out.splitlines()) == 1


# -- resume --------------------------------------------------------------------------------
def test_resuming_a_finished_run_trains_nothing(straight, tiny_bpe, tmp_path):
    """Nothing trained, saved or logged: last.pt and metrics.jsonl stay as they were."""
    model = tmp_path / "m"
    shutil.copytree(straight, model)
    assert run_cli(["train", "-i", tiny_bpe, "-o", model, "--resume"]) == 0
    assert load_checkpoint(model / "checkpoints" / "last.pt")["progress"]["step"] == STEPS
    assert_same_weights(straight, model)
    assert logged_steps(model) == logged_steps(straight)
    assert (model / "metrics.jsonl").read_bytes() == (straight / "metrics.jsonl").read_bytes()
    for name in ("last.pt", "best.pt"):
        assert (model / "checkpoints" / name).read_bytes() == \
            (straight / "checkpoints" / name).read_bytes()


def test_a_finished_run_killed_before_its_end_record_gets_it_on_resume(straight, tiny_bpe,
                                                                      tmp_path):
    """A kill between the final ``last.pt`` and the log's ``end`` record (what bench/chaos.py
    hit): --resume trains nothing and writes that record, as the uninterrupted run did."""
    model = tmp_path / "m"
    shutil.copytree(straight, model)
    lines = (model / "metrics.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    end = json.loads(lines[-1])
    assert end["event"] == "end"
    (model / "metrics.jsonl").write_text("".join(lines[:-1]), encoding="utf-8")
    assert run_cli(["train", "-i", tiny_bpe, "-o", model, "--resume"]) == 0
    again = (model / "metrics.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    assert again[:-1] == lines[:-1]
    restored = json.loads(again[-1])
    assert {k: restored[k] for k in ("event", "step", "epoch")} == \
        {k: end[k] for k in ("event", "step", "epoch")}
    assert_same_weights(straight, model)


def test_resuming_an_early_stopped_run_trains_nothing(tiny_bpe, tmp_path):
    """Early stopping ended the run: --resume with the same --patience trains nothing more,
    with a larger one it goes on."""
    model = tmp_path / "m"
    assert run_cli(["train", "-i", tiny_bpe, "-o", model,
                    *overriding(RUN, "--valid-every", "1", "--patience", "1",
                                "--early-stop-metric", "acc", "--lr", "1e-9",
                                "--max-steps", "30")]) == 0
    step = load_checkpoint(model / "checkpoints" / "last.pt")["progress"]["step"]
    assert step == 2                    # the weights barely move: no better dev accuracy
    log = (model / "metrics.jsonl").read_bytes()
    assert run_cli(["train", "-i", tiny_bpe, "-o", model, "--resume"]) == 0
    assert (model / "metrics.jsonl").read_bytes() == log
    assert run_cli(["train", "-i", tiny_bpe, "-o", model, "--resume", "--patience", "2"]) == 0
    assert load_checkpoint(model / "checkpoints" / "last.pt")["progress"]["step"] > step


@pytest.mark.slow
def test_sigkill_during_writes_then_resume_is_exact(straight, tiny_bpe, tmp_path):
    """Killed (SIGKILL) half-way through a checkpoint write, twice, and resumed: the same final
    weights and log records as the uninterrupted run, and no temporary file left."""
    model = tmp_path / "m"
    ckpts = model / "checkpoints"
    for round_, resume in enumerate(([], ["--resume"])):
        proc = popen(["train", "-i", tiny_bpe, "-o", model, *RUN, *resume],
                     env={"DEPNMT_CHECKPOINT_WRITE_DELAY": "0.4"})
        try:
            wait_for(lambda: (ckpts / "last.pt").exists() and leftovers(model)
                     and load_checkpoint(ckpts / "last.pt")["progress"]["step"] >= 2 + 3 * round_)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        assert leftovers(model), "the kill should have interrupted a write"
    assert run_cli(["train", "-i", tiny_bpe, "-o", model, "--resume"]) == 0
    assert_same_weights(straight, model)
    assert logged_steps(model) == logged_steps(straight)
    assert not leftovers(model)


def group_alive(pgid: int) -> bool:
    """Whether a process of the process group ``pgid`` is still there."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("to", ["process", "process group"])
def test_sigterm_saves_the_current_update_then_resume_is_exact(to, straight, tiny_bpe, tmp_path,
                                                               capsys):
    """SIGTERM to the training process, or to its whole process group (`timeout`, `kill
    -TERM -PGID`, a scheduler or service manager stopping every process of a job): its
    data-loader worker leaves the signal to it, and it stops cleanly after the update."""
    model = tmp_path / "m"
    proc = popen(["train", "-i", tiny_bpe, "-o", model,
                  *overriding(RUN, "--save-every", "0", "--workers", "1")], group=True)
    wait_for(lambda: (model / "metrics.jsonl").exists()
             and any(m["event"] == "train" for m in metrics(model)))
    if to == "process":
        proc.send_signal(signal.SIGTERM)
    else:
        os.killpg(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert "Traceback" not in err
    wait_for(lambda: not group_alive(proc.pid))        # its worker is gone too
    step = load_checkpoint(model / "checkpoints" / "last.pt")["progress"]["step"]
    # the signal lands after the first logged update: with --save-every 1 that update's save
    # (fsynced) can still be running, so the run may stop after update 1 already
    assert 1 <= step < STEPS
    assert f"stopped by SIGTERM after update {step}: saved {model / 'checkpoints' / 'last.pt'}" \
        in err
    assert not (model / "manifest.json").exists()     # the stage is not finished
    suggested = re.search(r"continue with `depnmt (train [^`]+)`", err).group(1)
    capsys.readouterr()
    assert run_cli(shlex.split(suggested)) == 0       # the command the message suggests
    assert "is deprecated" not in capsys.readouterr().err
    assert_same_weights(straight, model)
    assert logged_steps(model) == logged_steps(straight)


@pytest.mark.slow
def test_second_training_on_a_model_dir_is_refused(tiny_bpe, tmp_path):
    model = tmp_path / "m"
    proc = popen(["train", "-i", tiny_bpe, "-o", model, *overriding(RUN, "--max-steps", "100000")])
    try:
        wait_for(lambda: (model / "checkpoints" / "last.pt").exists())
        for extra in ([], ["--resume"]):
            second = subprocess.run(
                [sys.executable, "-m", "depnmt.cli", "train", "-i", str(tiny_bpe), "-o",
                 str(model), *RUN, *extra], capture_output=True, text=True,
                env={**os.environ, "DEPNMT_NO_PROGRESS": "1"})
            assert second.returncode == 2
            assert second.stderr.startswith(f"error: {model}: in use by process {proc.pid}")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    # the lock dies with its process
    assert run_cli(["train", "-i", tiny_bpe, "-o", model, "--resume", "--max-steps", "1"]) == 0


@pytest.mark.skipif(not torch.distributed.is_available()
                    or not torch.distributed.is_gloo_available(), reason="no gloo")
def test_sigterm_to_one_rank_stops_every_rank_after_the_same_update(tiny_bpe, tmp_path):
    """Under torchrun a signal that only rank 1 receives stops both ranks after the same update
    (else one would wait forever in a collective); rank 0 saves last.pt with both ranks' RNG
    states and says so; rank 1 exits 143."""
    from .test_distributed import free_port
    model = tmp_path / "m"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
           "--master_addr", "127.0.0.1", "--master_port", str(free_port()), "-m", "depnmt.cli",
           "train", "-i", str(tiny_bpe), "-o", str(model),
           *overriding(RUN, "--save-every", "0", "--valid-every", "0", "--max-steps", "100000",
                       "--device", "cpu")]
    proc = subprocess.Popen(cmd, env={**os.environ, "DEPNMT_NO_PROGRESS": "1",
                                      "OMP_NUM_THREADS": "1"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: (model / "metrics.jsonl").exists()
                 and any(m["event"] == "train" for m in metrics(model)))
        workers = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        rank1 = [pid for pid in workers
                 if b"RANK=1" in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")]
        assert len(rank1) == 1, workers
        os.kill(int(rank1[0]), signal.SIGTERM)
        _, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    state = load_checkpoint(model / "checkpoints" / "last.pt")
    step = state["progress"]["step"]
    assert f"stopped by SIGTERM after update {step}: saved" in err
    assert len(state["rng_ranks"]) == 2
    assert "exitcode  : 143" in err

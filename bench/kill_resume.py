"""Random SIGKILLs during training, each followed by ``--resume``, against an uninterrupted run
(the short version is ``tests/cli/test_reliability.py``).

A tiny model (the first 400 Multi30k pairs of ``../shared/data``, 300 BPE merges, 1 layer,
d_model 32) trains ``--steps`` updates with a checkpoint every ``--save-every`` updates and a
validation every ``--valid-every``, once without interruption and then ``--runs`` times with
at least ``--kills`` SIGKILLs each, every kill followed by ``depnmt train --resume``. Each kill
picks one of three moments at random (seeded):

* start-up — a uniform time in the first seconds after launch (imports, the lock, the log
  rewind, data loading);
* training — after the segment's first update, a uniform time within a few updates
  (updates, validations, checkpoint writes);
* checkpoint write — while a checkpoint's temporary file exists, with the write slowed down
  (``DEPNMT_CHECKPOINT_WRITE_DELAY``) so that kills land inside it.

When the last resume has finished the budget, each run is compared with the uninterrupted one:
final weights of ``last.pt`` and ``best.pt`` bit for bit, the log's train/valid records (event
and step, each exactly once and in the same order; the dev loss of each validation), whether
``last.pt``, ``best.pt`` and ``metrics.jsonl`` name the same best step, and the temporary files
left (by the kills, and after the final resume).

    python bench/kill_resume.py                      # 2 runs of >= 10 kills
    python bench/kill_resume.py --runs 3 --kills 15 --seed 7

Exit status 1 when any run differs.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import click
import torch

from depnmt.storage.checkpoint import load_checkpoint

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data" / "multi30k"
TINY = ["--layers", "1", "--d-model", "32", "--heads", "2", "--d-ff", "64", "--max-tokens", "150",
        "--warmup", "10", "--lr", "3e-3", "--log-every", "1", "--valid-max-sentences", "10",
        "--beam", "2"]
ENV = {**os.environ, "DEPNMT_NO_PROGRESS": "1", "OMP_NUM_THREADS": "1"}


def depnmt(args: list, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "depnmt.cli", *map(str, args)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, **kwargs)


def tiny_corpus(work: Path) -> Path:
    """prepare + bpe of the first 400 Multi30k pairs (dev 30); returns the bpe folder."""
    bpe = work / "bpe"
    if (bpe / "manifest.json").exists():
        return bpe
    files = {}
    for lang in ("en", "de"):
        with gzip.open(SHARED / f"train.{lang}.gz", "rt", encoding="utf-8") as fh:
            lines = [next(fh) for _ in range(460)]
        for split, part in (("train", lines[:400]), ("dev", lines[400:430]),
                            ("test", lines[430:])):
            files[split, lang] = work / f"{split}.{lang}"
            files[split, lang].write_text("".join(part), encoding="utf-8")
    args = ["prepare", "--src-lang", "en", "--tgt-lang", "de", "-o", work / "prepare"]
    for split in ("train", "dev", "test"):
        args += [f"--{split}-src", files[split, "en"], f"--{split}-tgt", files[split, "de"]]
    for cmd in (args, ["bpe", "-i", work / "prepare", "-o", bpe, "--merges", "300"]):
        proc = depnmt(cmd, env=ENV)
        if proc.wait() != 0:
            raise SystemExit(f"{cmd[0]} failed: {proc.stderr.read()}")
    return bpe


def records(model: Path) -> list[dict]:
    path = model / "metrics.jsonl"
    return [json.loads(l) for l in path.read_text().splitlines()] if path.exists() else []


def steps_logged(model: Path) -> list[tuple]:
    """(event, step, dev loss) of every train and valid record, in order."""
    return [(r["event"], r["step"], r.get("dev_nll")) for r in records(model)
            if r["event"] in ("train", "valid")]


def leftovers(model: Path) -> list[Path]:
    return list(model.rglob("*.tmp"))


def weights(path: Path) -> dict:
    return load_checkpoint(path)["model"]


def identical(a: Path, b: Path) -> bool:
    x, y = weights(a), weights(b)
    return x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)


def best_agrees(model: Path) -> bool:
    """last.pt's best step == best.pt's step == the log's last valid record with best=True."""
    last = load_checkpoint(model / "checkpoints" / "last.pt")["progress"]
    best = load_checkpoint(model / "checkpoints" / "best.pt")["progress"]["step"]
    logged = [r["step"] for r in records(model) if r["event"] == "valid" and r["best"]]
    return last.get("best_step") == best == (logged[-1] if logged else None)


def wait_for(predicate, proc: subprocess.Popen, timeout: float = 600) -> bool:
    """True once ``predicate()`` holds; False if ``proc`` ended first."""
    end = time.monotonic() + timeout
    while not predicate():
        if proc.poll() is not None or time.monotonic() > end:
            return False
        time.sleep(0.01)
    return True


def segment_step(model: Path) -> int:
    """The step of the last train record (0 before any)."""
    steps = [r["step"] for r in records(model) if r["event"] == "train"]
    return steps[-1] if steps else 0


def interrupted_run(bpe: Path, model: Path, train: list, kills: int, rng: random.Random,
                    delay: float) -> dict:
    """Kill and resume until ``kills`` kills happened, then resume to the end."""
    stats = Counter()
    while stats["kills"] < kills:
        # as a recipe does: --resume once a last.pt exists (a kill can come before the first)
        resume = ["--resume"] if (model / "checkpoints" / "last.pt").exists() else []
        mode = rng.choice(["start-up", "training", "training", "checkpoint write"])
        env = {**ENV, **({"DEPNMT_CHECKPOINT_WRITE_DELAY": str(delay)}
                         if mode == "checkpoint write" else {})}
        before = segment_step(model)
        proc = depnmt(["train", "-i", bpe, "-o", model, *train, *resume], env=env)
        stats["resumes"] += bool(resume)
        if mode == "start-up":
            time.sleep(rng.uniform(0.0, 6.0))
            reached = proc.poll() is None
        elif mode == "training":
            reached = wait_for(lambda: segment_step(model) > before, proc)
            time.sleep(rng.uniform(0.0, 2.0))
        else:                                   # a temporary file the kills did not leave
            old = set(leftovers(model))
            reached = wait_for(lambda: bool(set(leftovers(model)) - old), proc)
            time.sleep(rng.uniform(0.0, delay))
        if proc.poll() is not None:             # finished first: the budget is too small
            raise SystemExit(f"the run ended (status {proc.returncode}) before {kills} kills "
                             f"({dict(stats)}): raise --steps\n{proc.stderr.read()}")
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        stats["kills"] += 1
        stats[f"kills during {mode}" if reached else "kills during start-up"] += 1
        stats["temporary files left by kills"] += len(leftovers(model))
    proc = depnmt(["train", "-i", bpe, "-o", model, *train, "--resume"], env=ENV)
    stats["resumes"] += 1
    if proc.wait() != 0:
        raise SystemExit(f"final resume failed: {proc.stderr.read()}")
    return stats


@click.command()
@click.option("--runs", default=2, show_default=True, help="interrupted runs")
@click.option("--kills", default=10, show_default=True, help="SIGKILLs per run (at least)")
@click.option("--steps", default=80, show_default=True, help="updates of the training budget")
@click.option("--save-every", default=3, show_default=True)
@click.option("--valid-every", default=10, show_default=True)
@click.option("--write-delay", default=0.5, show_default=True,
              help="seconds a checkpoint write pauses half-way when a kill aims at it")
@click.option("--seed", default=1, show_default=True, help="seed of the kill moments")
@click.option("--work", type=click.Path(path_type=Path, file_okay=False),
              help="working folder (default: a temporary one, removed)")
def main(runs: int, kills: int, steps: int, save_every: int, valid_every: int,
         write_delay: float, seed: int, work: Path | None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        bpe = tiny_corpus(work)
        for old in [work / "straight", *work.glob("run[0-9]*")]:    # this script's own outputs
            shutil.rmtree(old, ignore_errors=True)
        train = [*TINY, "--max-steps", steps, "--save-every", save_every,
                 "--valid-every", valid_every]
        straight = work / "straight"
        started = time.monotonic()
        proc = depnmt(["train", "-i", bpe, "-o", straight, *train], env=ENV)
        if proc.wait() != 0:
            raise SystemExit(proc.stderr.read())
        print(f"uninterrupted run: {steps} updates in {time.monotonic() - started:.1f} s "
              f"(launch to exit)")
        failures = 0
        total = Counter()
        for run in range(1, runs + 1):
            model = work / f"run{run}"
            rng = random.Random(seed * 1000 + run)
            stats = interrupted_run(bpe, model, train, kills, rng, write_delay)
            logged = steps_logged(model)
            dup = sum(n - 1 for n in Counter((e, s) for e, s, _ in logged).values())
            checks = {
                "final weights bit-identical": identical(model / "checkpoints" / "last.pt",
                                                         straight / "checkpoints" / "last.pt"),
                "best.pt bit-identical": identical(model / "checkpoints" / "best.pt",
                                                   straight / "checkpoints" / "best.pt"),
                "log records = uninterrupted": logged == steps_logged(straight),
                "last.pt, best.pt and log agree on the best step": best_agrees(model),
            }
            left = len(leftovers(model))
            failures += not all(checks.values()) or dup > 0 or left > 0
            total.update(stats)
            total.update({"duplicate log records": dup, "temporary files at the end": left,
                          **{k: 0 if v else 1 for k, v in checks.items()}})
            print(f"run {run}: " + ", ".join(f"{k} {v}" for k, v in sorted(stats.items())))
            print(f"  {', '.join(f'{k}: {yes(v)}' for k, v in checks.items())}; duplicate log "
                  f"records: {dup}; temporary files after the final resume: {left}")
        print(f"total: {total['kills']} kills, {total['resumes']} resumes, "
              f"{runs - failures}/{runs} runs identical to the uninterrupted one, "
              f"{total['duplicate log records']} duplicate log records, "
              f"{total['temporary files at the end']} temporary files left")
    sys.exit(1 if failures else 0)


def yes(flag: bool) -> str:
    return "yes" if flag else "NO"


if __name__ == "__main__":
    main()

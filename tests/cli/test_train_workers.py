"""``train --workers N``: batches collated in data-loader processes give the run that
collating them in the training process gives (same losses, same weights, also resumed), and
every training record says how long the loop waited for its batches."""

from __future__ import annotations

import json

import torch

from depnmt.storage.checkpoint import load_checkpoint

from .conftest import TINY_MODEL, import_random_trees, overriding, run_cli


def records(model):
    return [json.loads(line) for line in (model / "metrics.jsonl").read_text().splitlines()]


def test_workers_give_the_same_run_and_log_the_wait(tiny_bpe, tmp_path_factory, tmp_path):
    trees = import_random_trees(tiny_bpe, tmp_path_factory.mktemp("given-workers"),
                                "parse-workers", ("en",), ["nsubj", "obj", "det"], seed=5)
    common = ["-i", tiny_bpe, "-t", trees, *overriding(TINY_MODEL, "--log-every", "1"),
              "--scheme", "abs+dep+rel", "--valid-every", "0", "--dropout", "0.2"]
    for name, workers in (("w0", "0"), ("w2", "2")):
        assert run_cli(["train", *common, "-o", tmp_path / name, "--workers", workers,
                        "--max-steps", "8"]) == 0
    assert run_cli(["train", *common, "-o", tmp_path / "split", "--workers", "2",
                    "--max-steps", "4"]) == 0
    assert run_cli(["train", "-i", tiny_bpe, "-t", trees, "-o", tmp_path / "split", "--resume",
                    "--max-steps", "8"]) == 0
    losses = {name: [r["loss"] for r in records(tmp_path / name) if r["event"] == "train"]
              for name in ("w0", "w2", "split")}
    assert len(losses["w0"]) == 8 and losses["w0"] == losses["w2"] == losses["split"]
    weights = [load_checkpoint(tmp_path / name / "checkpoints" / "last.pt")["model"]
               for name in ("w0", "w2", "split")]
    assert all(torch.equal(weights[0][k], w[k]) for w in weights[1:] for k in weights[0])
    for r in records(tmp_path / "w2"):
        if r["event"] == "train":
            assert 0 <= r["batch_wait_s"] and 0 <= r["batch_wait_share"] <= 1

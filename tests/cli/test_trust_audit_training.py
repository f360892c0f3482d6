"""Training numbers that must not be silently wrong: ``--resume --lr X`` trained on at the
rate the run started with (the schedule's saved state won over the flag, while config.json
recorded X; the advice after a diverged run is "lower --lr, then --resume"), the ``lr`` of a
``train`` record was the next update's (one update of the warm-up ahead), and ``--update-freq``
left each epoch's last batches out without a word (those that make no whole update)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from depnmt.core.vocab import EOS
from depnmt.data.batches import Example, collate, shard_updates
from depnmt.model.transformer import ModelConfig, TransformerNMT
from depnmt.training.config import TrainOptions
from depnmt.training.metricslog import left_out_warning
from depnmt.training.step import Updater, inverse_sqrt

from .conftest import TINY_MODEL, overriding, run_cli

PEAK, WARMUP = 3e-3, 10      # TINY_MODEL's --lr and --warmup


def logged_rates(model: Path) -> dict[int, float]:
    """Update -> the ``lr`` of its ``train`` record in ``model``'s metrics.jsonl."""
    records = [json.loads(line) for line in (model / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["lr"] for r in records if r["event"] == "train"}


def test_resume_with_another_lr_trains_at_that_peak(tiny_bpe, tmp_path, capsys):
    model = tmp_path / "m"
    flags = overriding(TINY_MODEL, "--log-every", "1", "--workers", "0")
    assert run_cli(["train", "-i", tiny_bpe, "-o", model, *flags, "--max-steps", "4",
                    "--valid-every", "4"]) == 0
    # update k steps with the factor of k - 1 updates done (update 1: that of 1), as logged
    assert logged_rates(model) == pytest.approx({1: PEAK / 10, 2: PEAK / 10, 3: 2 * PEAK / 10,
                                                 4: 3 * PEAK / 10})
    capsys.readouterr()
    from depnmt import train_model
    train_model({"input": str(tiny_bpe), "output": str(model), "resume": True, "lr": 1e-3,
                 "max-steps": 6, "workers": 0, "device": "cpu"})
    assert ("--lr 0.001: the learning rate schedule continues at update 5 with this peak (the "
            "run trained with 0.003 so far)") in capsys.readouterr().err
    rates = logged_rates(model)
    assert [rates[5], rates[6]] == pytest.approx([1e-3 * inverse_sqrt(4, WARMUP),
                                                  1e-3 * inverse_sqrt(5, WARMUP)])
    assert json.loads((model / "config.json").read_text())["training"]["lr"] == 1e-3


def test_resume_with_other_settings_says_so_and_logs_it(tiny_bpe, tmp_path, capsys):
    """``--resume`` with another --warmup and --label-smoothing: one warning naming both values
    and the update, and a ``settings_changed`` record in metrics.jsonl at that update
    (config.json records only the new values: nothing said what the first updates trained
    with); it survives a later resume's rewind; the same settings again add nothing. A resume
    that is refused (another --dropout) leaves config.json and the log as they were (it wrote
    its settings into config.json, and every later --resume took them and was refused)."""
    model = tmp_path / "m"
    flags = overriding(TINY_MODEL, "--workers", "0")
    assert run_cli(["train", "-i", tiny_bpe, "-o", model, *flags, "--max-steps", "4",
                    "--valid-every", "4"]) == 0
    capsys.readouterr()
    again = ["train", "-i", tiny_bpe, "-o", model, "--resume", "--workers", "0"]
    config, log = ((model / name).read_bytes() for name in ("config.json", "metrics.jsonl"))
    # refused (a checkpoint trains on with its own dropout): nothing recorded, nothing changed
    assert run_cli([*again, "--max-steps", "6", "--dropout", "0.2"]) == 2
    assert "checkpoint was trained with dropout=0.1" in capsys.readouterr().err
    assert [(model / name).read_bytes() for name in ("config.json", "metrics.jsonl")] == [
        config, log]
    assert run_cli([*again, "--max-steps", "6", "--warmup", "20", "--label-smoothing",
                    "0.2"]) == 0
    assert (f"warning: {model}: trained up to update 4 with --warmup {WARMUP}, not 20; "
            f"--label-smoothing 0.1, not 0.2; --max-steps 4, not 6: it continues with the "
            f"settings given; recorded in metrics.jsonl") in capsys.readouterr().err
    assert run_cli([*again, "--max-steps", "8"]) == 0
    records = [json.loads(line) for line in (model / "metrics.jsonl").read_text().splitlines()]
    changed = [r for r in records if r["event"] == "settings_changed"]
    assert [(r["step"], r["changed"]) for r in changed] == [
        (4, [f"--warmup {WARMUP}, not 20", "--label-smoothing 0.1, not 0.2",
             "--max-steps 4, not 6"]),
        (6, ["--max-steps 6, not 8"])]
    train_times = [r["time"] for r in records if r["event"] == "train"]
    assert all(r["time"] <= max(train_times) for r in changed)       # the training clock
    assert run_cli([*again, "--max-steps", "8"]) == 0                   # finished: nothing to add
    assert "settings_changed" not in capsys.readouterr().err


def test_the_logged_rate_is_the_one_adam_stepped_with():
    torch.manual_seed(0)
    model = TransformerNMT(ModelConfig(20, 20, d_model=8, n_heads=2, d_ff=8, encoder_layers=1,
                                       decoder_layers=1, dropout=0.0))
    updater = Updater(model, torch.device("cpu"), None, TrainOptions(lr=1.0, warmup=4))
    stepped = []
    updater.optimizer.register_step_pre_hook(
        lambda optimizer, *_: stepped.append(optimizer.param_groups[0]["lr"]))
    batch = collate([Example(0, [5, 6, EOS], [7, 8])])
    logged = []
    for _ in range(6):
        updater.step([batch])
        logged.append(updater.lr)
    assert logged == stepped == [0.25, 0.25, 0.5, 0.75, 1.0, pytest.approx(0.8 ** 0.5)]


@pytest.mark.parametrize("batches,freq,world", [(33, 4, 1), (33, 3, 1), (35, 2, 2), (9, 1, 4),
                                                (8, 8, 1)])
def test_the_warning_counts_what_sharding_leaves_out(batches, freq, world):
    trained = max((done for done, _ in shard_updates(batches, freq, 0, 0, world)), default=0)
    warning = left_out_warning(batches, freq, world)
    if trained == batches:
        assert warning is None
    else:
        assert f"and the last {batches - trained} batch" in warning


def test_update_freq_says_which_batches_an_epoch_leaves_out(tiny_bpe, tmp_path, capsys):
    flags = overriding(TINY_MODEL, "--workers", "0")
    assert run_cli(["train", "-i", tiny_bpe, "-o", tmp_path / "m", *flags, "--max-steps", "1",
                    "--update-freq", "4"]) == 0
    err = capsys.readouterr().err
    n_batches = int(re.search(r"(\d+) batches/epoch", err).group(1))
    left = n_batches % 4
    assert left, "the tiny corpus's batches are a multiple of 4: pick another --update-freq"
    assert (f"warning: --update-freq 4: each epoch's {n_batches} batches make {n_batches // 4} "
            f"updates of 4, and the last {left} batch") in err

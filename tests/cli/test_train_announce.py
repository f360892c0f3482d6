"""`depnmt train` says before it trains what it trains and until when: the model size, the
budget and the stop rule in effect, and a warning when nothing ends the run by itself."""

from __future__ import annotations

import pytest

from depnmt.model.transformer import ModelConfig
from depnmt.training.config import TrainOptions
from depnmt.training.loop import Trainer
from depnmt.training.metricslog import NO_LIMIT_WARNING, budget_summary, has_limit, model_summary

from .conftest import TINY_MODEL, run_cli


def test_the_model_line_names_the_size():
    assert model_summary(ModelConfig(10, 10), 44_123_456) == \
        "model: 6+6 layers, d_model 512, 8 heads, d_ff 2048, 44.1 M parameters"
    assert model_summary(ModelConfig(10, 10, d_model=256, n_heads=4, d_ff=1024, encoder_layers=3,
                                     decoder_layers=1), 2_049_999).startswith(
        "model: 3+1 layers, d_model 256, 4 heads, d_ff 1024, 2.0 M parameters")


@pytest.mark.parametrize("options, refs, expected", [
    (dict(max_epochs=30, max_minutes=20, patience=5, early_stop_metric="acc"), True,
     "budget: at most 30 epochs or 20 minutes; stops early after 5 validations without a "
     "better dev acc"),
    (dict(max_steps=1, max_minutes=0.5), True,
     "budget: at most 1 update or 0.5 minutes; no early stopping"),
    (dict(patience=3), False,                     # bleu without dev references: the loss
     "budget: no epoch, update or time limit; stops early after 3 validations without a "
     "better dev loss"),
    (dict(patience=3), True, "budget: no epoch, update or time limit; stops early after 3 "
     "validations without a better dev BLEU"),
    ({}, True, "budget: no epoch, update or time limit; no early stopping"),
])
def test_the_budget_line_names_limits_and_stop_rule(options, refs, expected):
    assert budget_summary(TrainOptions(**options), refs) == expected


@pytest.mark.parametrize("options", [dict(max_epochs=1), dict(max_steps=1),
                                     dict(max_minutes=0.1), dict(patience=1)])
def test_any_limit_or_early_stopping_counts_as_a_limit(options):
    assert has_limit(TrainOptions(**options)) and not has_limit(TrainOptions())


def test_train_announces_size_and_budget_once(tiny_bpe, tmp_path, capsys):
    assert run_cli(["train", "-i", tiny_bpe, "-o", tmp_path / "m", *TINY_MODEL,
                    "--max-steps", "2", "--valid-every", "0", "--patience", "4"]) == 0
    err = capsys.readouterr().err
    assert err.count("model: 1+1 layers, d_model 32, 2 heads, d_ff 64, ") == 1
    assert err.count("budget: at most 2 updates; stops early after 4 validations without a "
                     "better dev BLEU") == 1
    assert "warning: no limit" not in err
    start = err.index("training abs on cpu")
    assert start < err.index("model: ") < err.index("budget: ")


def test_train_without_any_limit_warns(tiny_bpe, tmp_path, capsys, monkeypatch):
    """A run with neither limit nor early stopping (the budget check is patched to end it
    after its first update, as a Ctrl-C would) warns once, before training."""
    monkeypatch.setattr(Trainer, "_budget_left", lambda self, started, base: False)
    assert run_cli(["train", "-i", tiny_bpe, "-o", tmp_path / "m", *TINY_MODEL,
                    "--valid-every", "0"]) == 0
    err = capsys.readouterr().err
    assert "budget: no epoch, update or time limit; no early stopping" in err
    assert err.count(f"warning: {NO_LIMIT_WARNING}") == 1
    assert err.index("budget: ") < err.index("warning: no limit")

"""Bad input, class "numbers that are not numbers": ``nan`` and ``inf`` where an option takes a
number are refused by the one conversion every way in shares — the command line, ``--config``
files and the Python API — with the option named (click's bounds let NaN through: ``--lr nan``
ended in a traceback, ``--lr inf`` trained to NaN weights saved as best)."""

from __future__ import annotations

import pytest

from depnmt.core.errors import DepnmtError

from .conftest import run_cli


@pytest.mark.parametrize("args,flag", [
    (["train", "--lr", "nan"], "--lr"), (["train", "--lr", "inf"], "--lr"),
    (["train", "--dropout", "nan"], "--dropout"), (["train", "--clip-norm", "inf"], "--clip-norm"),
    (["translate", "-m", "M", "--max-len-a", "nan"], "--max-len-a"),
    (["controls", "-i", "P", "-o", "O", "--kind", "noise", "--noise", "nan"], "--noise"),
    (["multitask", "--parse-fraction", "nan"], "--parse-fraction")])
def test_non_finite_numbers_are_refused_on_the_command_line(args, flag, tmp_path, capsys):
    if args[0] == "train":
        args = [*args, "-i", tmp_path / "bpe", "-o", tmp_path / "model"]
    assert run_cli(args) == 2
    err = capsys.readouterr().err
    assert f"Invalid value for '{flag}'" in err and "is not a finite number" in err, err
    assert not (tmp_path / "model").exists()


def test_non_finite_numbers_are_refused_in_a_config_file(tmp_path, capsys):
    config = tmp_path / "train.yaml"
    config.write_text("lr: .inf\n", encoding="utf-8")
    assert run_cli(["train", "-i", tmp_path / "bpe", "-o", tmp_path / "model",
                    "--config", config]) == 2
    err = capsys.readouterr().err
    assert f"Invalid value for '--lr' (lr in {config}:1): inf is not a finite number." in err


def test_non_finite_numbers_are_refused_by_the_api(tmp_path):
    from depnmt.api import train_model
    with pytest.raises(DepnmtError, match="'--dropout'.*nan is not a finite number"):
        train_model({"input": str(tmp_path / "bpe"), "output": str(tmp_path / "model"),
                     "dropout": float("nan")})
    assert not (tmp_path / "model").exists()


def test_a_training_whose_loss_is_not_finite_stops_and_saves_no_nan(tiny_bpe, tmp_path, capsys):
    """A learning rate that blows the weights up: the run stops with one line at the first
    update whose loss is not finite, and no checkpoint holds a weight that is not a number."""
    import torch

    from .conftest import TINY_MODEL, overriding
    model = tmp_path / "m"
    assert run_cli(["train", "-i", tiny_bpe, "-o", model,
                    *overriding(TINY_MODEL, "--lr", "1e30", "--warmup", "1"),
                    "--max-steps", "20", "--valid-every", "1"]) == 2
    err = capsys.readouterr().err
    [line] = [x for x in err.splitlines() if x.startswith("error:")]
    assert "(not finite)" in line or "the weights are not finite" in line, line
    for checkpoint in (model / "checkpoints").glob("*.pt"):
        state = torch.load(checkpoint, weights_only=True)["model"]
        assert all(torch.isfinite(t).all() for t in state.values() if t.is_floating_point()), \
            checkpoint

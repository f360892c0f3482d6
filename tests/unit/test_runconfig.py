"""One run configuration (depnmt/training/config.py): `depnmt train` (click) and `train_model` (no
click) read the same options the same way, with the same messages."""

from __future__ import annotations

import click
import pytest
import yaml

from depnmt.commands.options import checked_value
from depnmt.commands.train import command, given_params
from depnmt.core.errors import DepnmtError
from depnmt.training.config import _checked, from_params, parse_values, train_params

VALUES = [0, 1, 7, -1, 1.5, 0.5, 2**33, "3", "many", "", "bleu", "power", "fp32", "1,2",
          "all", True, False, "yes", "off", "label,pos"]


def click_value(ctx: click.Context, name: str, value):
    """What `--config` makes of ``value`` for the option ``name`` (or its error message; None
    where click itself fails, e.g. on an integer for a boolean flag)."""
    param = next(p for p in command.params if p.name == name)
    try:
        return checked_value(ctx, param, value, "k in F")
    except click.BadParameter as exc:
        return exc.format_message()
    except (AttributeError, TypeError):
        return None


def config_value(name: str, value):
    param = next(p for p in train_params() if p.name == name)
    try:
        return _checked(param, value, "k in F")
    except DepnmtError as exc:
        return str(exc)


@pytest.mark.parametrize("name", [p.name for p in train_params()
                                  if p.name not in ("data_dir", "model_dir", "trees_dir",
                                                    "tensorboard")])
def test_a_value_is_taken_or_refused_alike(name):
    ctx = command.make_context("train", ["-i", "d", "-o", "m"])
    compared = 0
    for value in VALUES:
        expected = click_value(ctx, name, value)
        if expected is not None:
            assert config_value(name, value) == expected, (name, value)
            compared += 1
    assert compared > len(VALUES) // 2


def test_train_model_reads_a_file_as_train_config_does(tmp_path, monkeypatch):
    monkeypatch.delenv("DEPNMT_PRECISION", raising=False)
    values = {"data": "bpe", "output": str(tmp_path / "m"), "scheme": "Transformer_gps",
              "gps-layers": "0", "max_tokens": 300, "tie-embeddings": False, "layers": 2,
              "rel-k": 3, "lr": "2e-3"}
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(values), encoding="utf-8")
    ctx = command.make_context("train", ["--config", str(path)])
    params, given = parse_values(values, str(path))
    assert params == ctx.params and given == given_params(ctx)
    config = from_params(params, given)
    assert config.model.encoder_layers == 2 and config.model.schemes[1]["options"]["gps_layer"] \
        == "1"
    assert config.settings["output"] == str((tmp_path / "m").resolve())
    assert "rel-k" not in config.settings and "gps-layer" in config.settings


def test_the_mapping_wins_over_an_environment_variable_as_the_file_does(monkeypatch):
    monkeypatch.setenv("DEPNMT_PRECISION", "bf16")
    params, given = parse_values({"input": "d", "output": "m", "precision": "fp16"}, "F")
    assert params["train_precision"] == "fp16" and "train_precision" in given
    params, given = parse_values({"input": "d", "output": "m"}, "F")
    assert params["train_precision"] == "bf16" and "train_precision" in given

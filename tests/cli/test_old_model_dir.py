"""A model directory saved before issue 13 (``config_format`` 1: one flat bag of every scheme's
options) still loads, resumes its settings and translates exactly as it did
(``tests/data/old-format-model``, written by commit 78684fe; its README says how)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from depnmt.core.errors import DepnmtError
from depnmt.model.transformer import ModelConfig
from depnmt.storage.modeldir import CONFIG_FORMAT, load_model_checkpoint, read_config

from .conftest import run_cli

OLD = Path(__file__).resolve().parents[1] / "data" / "old-format-model"


def test_old_model_dir_translates_as_it_did(capsys):
    capsys.readouterr()
    with open(OLD / "input.conllu", encoding="utf-8") as given:
        import sys
        stdin, sys.stdin = sys.stdin, given
        try:
            # fp32: the expected output was written in fp32 (auto is bf16 on some CPUs)
            assert run_cli(["translate", "-m", OLD, "--input-format", "conllu",
                            "--precision", "fp32"]) == 0
        finally:
            sys.stdin = stdin
    expected = (OLD / "expected.de").read_text(encoding="utf-8")
    assert capsys.readouterr().out == expected


def test_old_config_is_upgraded_to_per_scheme_options():
    assert json.loads((OLD / "config.json").read_text())["config_format"] == 1
    config = read_config(OLD)
    assert config["config_format"] == CONFIG_FORMAT
    schemes = {s["name"]: s["options"] for s in config["model"]["schemes"]}
    assert list(schemes) == ["abs", "rel", "dep", "gps"]
    assert schemes["abs"] == {}
    assert schemes["rel"] == {"rel_k": 3, "rel_terms": "key,value"}
    assert schemes["dep"] == {"subword_tree": "chain", "chain_head": "last", "dep_l": 1,
                              "dep_terms": "key,value"}
    assert schemes["gps"]["gps_layer"] == "all" and schemes["gps"]["gps_dim"] is None
    assert set(schemes["gps"]["gps_labels"]) == {"root", "nsubj", "obj", "det", "amod", "obl"}
    # the checkpoint still holds the old config; it is the same model
    cfg = ModelConfig.from_dict(config["model"])
    load_model_checkpoint(OLD / "checkpoints" / "last.pt", cfg.to_dict())


def test_resume_flags_come_from_an_old_config():
    from depnmt.commands.train import command
    from depnmt.training.config import inherit_saved
    ctx = command.make_context("train", ["--data", "d", "-o", str(OLD)])
    params = inherit_saved(ctx.params, set(), OLD)
    assert params["scheme"] == "abs+rel+dep+gps"
    assert (params["rel_k"], params["dep_l"], params["gps_layer"]) == (3, 1, "all")
    assert params["pascal_sigma"] == 1.0                      # not this model's: the default
    assert (params["arch_d_model"], params["arch_share_all_embeddings"]) == (24, True)
    assert params["train_precision"] == "fp32" and params["search_beam"] == 2


def test_an_unknown_scheme_in_an_old_config_is_an_error(tmp_path):
    model = tmp_path / "m"
    shutil.copytree(OLD, model)
    config = json.loads((model / "config.json").read_text())
    config["model"]["scheme"] = ["abs", "nonesuch"]
    (model / "config.json").write_text(json.dumps(config))
    with pytest.raises(DepnmtError, match=r"config\.json: unknown positional scheme.*nonesuch"):
        read_config(model)

"""`depnmt train --compile dynamic`: the option in --help and --config, what metrics.jsonl
counts, checkpoints that are the plain model's, --resume with and without it, and DDP.

torch.compile's backend here is ``eager`` (``$DEPNMT_COMPILE_BACKEND``): TorchDynamo traces,
guards and recompiles as with inductor, without generating code (inductor's C++ build takes
minutes on a 2-core CPU)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
import yaml

from depnmt.storage.checkpoint import load_checkpoint

from .conftest import TINY_MODEL, overriding, run_cli, run_subprocess
from .test_distributed import COMMON, LR, torchrun

# dropout 0: a compiled step draws its dropout masks otherwise (torch's dropout, not depnmt's)
RUN = overriding(TINY_MODEL, "--max-tokens", "150", "--valid-every", "0", "--log-every", "2",
                 "--dropout", "0")
COUNTS = ("compiled_graphs", "recompiles", "graph_breaks")


pytestmark = pytest.mark.usefixtures("fresh_dynamo")   # tests/conftest.py


def records(model: Path) -> list[dict]:
    return [json.loads(line) for line in (model / "metrics.jsonl").read_text().splitlines()]


def losses(model: Path) -> list[tuple[int, float]]:
    return [(r["step"], r["loss"]) for r in records(model) if r["event"] == "train"]


def test_the_option_is_in_help_under_hardware_and_precision():
    help_text = run_subprocess(["train", "--help"], env={"COLUMNS": "200"}).stdout
    section = help_text[help_text.index("Hardware and precision"):]
    section = section[:section.index("Logging")]
    assert re.search(r"--compile \[off\|dynamic\]", section), section


@pytest.mark.slow
def test_a_compiled_run_from_config_logs_its_compiles_and_saves_the_plain_model(tiny_bpe,
                                                                                tmp_path):
    """`compile: dynamic` in a --config file: the run records the setting (config.json,
    train.yaml), every train record and the end record count the compiles (one graph each for
    the forward pass and the loss, over 4 batches of different shapes: no recompile, no graph
    break), the losses are the uncompiled run's, and last.pt's weights are the plain model's,
    which translate loads."""
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump({"compile": "dynamic", "max-steps": 4}), encoding="utf-8")
    compiled, eager = tmp_path / "compiled", tmp_path / "eager"
    assert run_cli(["train", "--config", cfg, "-i", tiny_bpe, "-o", compiled, *RUN]) == 0
    assert run_cli(["train", "-i", tiny_bpe, "-o", eager, *RUN, "--max-steps", "4"]) == 0

    assert json.loads((compiled / "config.json").read_text())["training"]["compile"] == \
        "dynamic"
    assert yaml.safe_load((compiled / "train.yaml").read_text())["compile"] == "dynamic"
    logged = [r for r in records(compiled) if r["event"] in ("train", "end")]
    assert [r["event"] for r in logged] == ["train", "train", "end"]
    assert [[r[k] for k in COUNTS] for r in logged] == [[2, 0, 0]] * 3
    assert records(compiled)[0]["compile"] == "dynamic" and "compile" not in records(eager)[0]
    assert not any(k in r for r in records(eager) for k in COUNTS)
    assert losses(compiled) == losses(eager) and losses(eager)

    state = load_checkpoint(compiled / "checkpoints" / "last.pt")["model"]
    plain = load_checkpoint(eager / "checkpoints" / "last.pt")["model"]
    assert state.keys() == plain.keys() and not any("_orig_mod" in k for k in state)
    src = tmp_path / "src.txt"
    src.write_text("a man is walking .\n", encoding="utf-8")
    assert run_cli(["translate", "-m", compiled, "-i", src, "-o", tmp_path / "hyp"]) == 0


@pytest.mark.slow
def test_resume_turns_compiling_off_and_on(tiny_bpe, tmp_path):
    """A compiled run resumed without compiling (--compile off), then with it again: the
    setting is the run's like --device (a flag not given keeps the saved one), every resume
    goes on from its checkpoint, and only compiled stretches log compile counts."""
    model = tmp_path / "m"
    assert run_cli(["train", "-i", tiny_bpe, "-o", model, *RUN, "--max-steps", "2",
                    "--compile", "dynamic"]) == 0
    assert run_cli(["train", "-o", model, "--resume", "--compile", "off",
                    "--max-steps", "4"]) == 0
    assert json.loads((model / "config.json").read_text())["training"]["compile"] == "off"
    assert run_cli(["train", "-o", model, "--resume", "--compile", "dynamic",
                    "--max-steps", "6"]) == 0
    train = [r for r in records(model) if r["event"] == "train"]
    assert [r["step"] for r in train] == [2, 4, 6]
    assert ["compiled_graphs" in r for r in train] == [True, False, True]
    assert load_checkpoint(model / "checkpoints" / "last.pt")["progress"]["step"] == 6


def test_a_bad_value_in_config_is_one_line(tiny_bpe, tmp_path, capsys):
    cfg = tmp_path / "run.yaml"
    cfg.write_text("compile: fast\n", encoding="utf-8")
    assert run_cli(["train", "--config", cfg, "-i", tiny_bpe, "-o", tmp_path / "m"]) == 2
    err = capsys.readouterr().err
    assert "Invalid value for '--compile'" in err and f"compile in {cfg}" in err, err
    assert not (tmp_path / "m").exists()


def test_an_unknown_backend_is_one_line(tiny_bpe, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DEPNMT_COMPILE_BACKEND", "nosuch")
    assert run_cli(["train", "-i", tiny_bpe, "-o", tmp_path / "m", *RUN, "--max-steps", "1",
                    "--compile", "dynamic"]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(errors) == 1 and errors[0].startswith(
        "error: $DEPNMT_COMPILE_BACKEND: unknown torch.compile backend 'nosuch' (known: "), errors


@pytest.mark.slow
def test_two_compiled_processes_train_like_one_with_double_update_freq(tiny_bpe, tmp_path):
    """Under torchrun the DDP wrapper is compiled (its no_sync micro-batches included): 2 gloo
    processes with --update-freq 2 end where one compiled process with --update-freq 4 does."""
    two, one = tmp_path / "two", tmp_path / "one"
    flags = [*COMMON, "--compile", "dynamic", "--workers", "0"]
    proc = torchrun(["train", "-i", tiny_bpe, "-o", two, *flags, "--update-freq", "2"])
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert run_cli(["train", "-i", tiny_bpe, "-o", one, *flags, "--update-freq", "4"]) == 0
    a, b = (load_checkpoint(m / "checkpoints" / "last.pt") for m in (two, one))
    assert a["progress"]["step"] == b["progress"]["step"] == 4
    assert a["model"].keys() == b["model"].keys()
    for name in b["model"]:
        atol = 4 * LR if name.endswith("k_proj.bias") else 1e-5   # as test_distributed's
        assert torch.allclose(a["model"][name], b["model"][name], atol=atol), name
    train = [r for r in records(two) if r["event"] == "train"]
    assert train and all(r["compiled_graphs"] >= 2 for r in train)


def test_a_compiled_run_stopped_and_resumed_ends_as_the_uninterrupted_one(tiny_bpe, tmp_path):
    """With dropout (torch's, under compilation), a compiled run stopped after 3 updates and
    resumed compiled to 6 ends with the uninterrupted compiled run's weights, bit for bit: the
    masks come from the RNG states the checkpoint saves."""
    run = overriding(RUN, "--dropout", "0.3")
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    assert run_cli(["train", "-i", tiny_bpe, "-o", whole, *run, "--max-steps", "6",
                    "--compile", "dynamic"]) == 0
    assert run_cli(["train", "-i", tiny_bpe, "-o", parts, *run, "--max-steps", "3",
                    "--compile", "dynamic"]) == 0
    torch._dynamo.reset()                       # a new process compiles afresh
    assert run_cli(["train", "-o", parts, "--resume", "--max-steps", "6"]) == 0
    a, b = (load_checkpoint(m / "checkpoints" / "last.pt")["model"] for m in (whole, parts))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

"""The Python API (depnmt.train_model, depnmt.Translator), used as a user would: the same
model as `depnmt train --config`, the same translations as `depnmt translate`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import depnmt
from depnmt.core.errors import DepnmtError

from .conftest import run_cli

TINY = {"layers": 1, "d-model": 32, "heads": 2, "d-ff": 64, "max-tokens": 400, "warmup": 10,
        "lr": 3e-3, "log-every": 2, "valid-every": 0, "valid-max-sentences": 20, "beam": 2,
        "max-steps": 6, "device": "cpu"}


@pytest.fixture(scope="module")
def api_model(tiny_bpe, tmp_path_factory) -> Path:
    """A tiny model trained with depnmt.train_model from a dict."""
    model = tmp_path_factory.mktemp("api") / "m"
    assert depnmt.train_model({"data": str(tiny_bpe), "model_dir": model, **TINY}) == model
    return model


def losses(model: Path) -> list[tuple]:
    """(step, training loss) of each ``train`` record of ``metrics.jsonl``."""
    rows = [json.loads(line) for line in (model / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["loss"]) for r in rows if r["event"] == "train"]


def source_lines(tiny_bpe: Path) -> list[str]:
    lines = (tiny_bpe.parent / "prepare" / "test.raw.en").read_text().splitlines()[:6]
    return [*lines[:3], "", *lines[3:]]


def cli_translate(model: Path, lines: list[str], tmp_path: Path, capsys, *flags) -> list[str]:
    """`depnmt translate -m MODEL --device cpu FLAGS < lines`, its output lines."""
    source = tmp_path / "in.txt"
    source.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    capsys.readouterr()
    assert run_cli(["translate", "-m", model, "-i", source, "--device", "cpu", *flags]) == 0
    return capsys.readouterr().out.splitlines()


def test_train_model_is_train_with_config(api_model, tiny_bpe, tmp_path):
    """The dict's model is the one `depnmt train --config` trains from the same settings."""
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump({"data": str(tiny_bpe), **TINY}), encoding="utf-8")
    cli_model = tmp_path / "cli"
    assert run_cli(["train", "--config", cfg, "-o", cli_model]) == 0
    assert json.loads((api_model / "config.json").read_text()) == \
        json.loads((cli_model / "config.json").read_text())
    assert losses(api_model) == losses(cli_model) and losses(api_model)
    settings = yaml.safe_load((api_model / "train.yaml").read_text())
    assert settings["output"] == str(api_model.resolve()) and settings["max-steps"] == 6


def test_translator_matches_the_translate_command(api_model, tiny_bpe, tmp_path, capsys):
    lines = source_lines(tiny_bpe)
    translator = depnmt.Translator.load(api_model, device="cpu")
    out = translator.translate(lines)
    assert out == cli_translate(api_model, lines, tmp_path, capsys)
    assert len(out) == len(lines) and out[3] == "" and all(out[:3])
    greedy = translator.translate(lines, beam=1, alpha=0.0)   # for this call only
    assert greedy == cli_translate(api_model, lines, tmp_path, capsys, "--beam", "1",
                                   "--alpha", "0")
    assert translator.translate(lines) == out and translator.search.beam == 2


def test_translator_load_options(api_model, tiny_bpe, tmp_path, capsys):
    """Load-time search defaults and a named checkpoint, as translate's flags."""
    lines = source_lines(tiny_bpe)
    translator = depnmt.Translator.load(api_model, checkpoint="last", device="cpu", beam=1)
    assert translator.translate(lines) == cli_translate(api_model, lines, tmp_path, capsys,
                                                        "-c", "last", "--beam", "1")
    with pytest.raises(TypeError, match="list of sentences"):
        translator.translate("A man.")
    with pytest.raises(TypeError, match="bean"):
        translator.translate(lines, bean=3)


def test_translator_load_takes_the_earlier_positional_order(api_model, tiny_bpe):
    """``Translator.load(dir, checkpoint, device, precision, max_tokens, batch_size, quantize)``
    by position, as earlier releases took it, is the same load as with keywords."""
    lines = source_lines(tiny_bpe)[:5]
    by_position = depnmt.Translator.load(api_model, "last", "cpu", "fp32", 300, 2)
    by_keyword = depnmt.Translator.load(api_model, checkpoint="last", device="cpu",
                                        precision="fp32", max_tokens=300, batch_size=2)
    assert by_position.translate(lines) == by_keyword.translate(lines)
    with pytest.raises(TypeError, match="multiple values for argument 'device'"):
        depnmt.Translator.load(api_model, None, "cpu", device="cpu")
    with pytest.raises(TypeError, match="at most 7 positional"):
        depnmt.Translator.load(api_model, None, "cpu", "fp32", 300, 2, "none", "extra")


def test_train_model_errors_are_depnmt_errors(tiny_bpe, tmp_path):
    with pytest.raises(DepnmtError, match="unknown option 'max-token'.*'max-tokens'"):
        depnmt.train_model({"data": str(tiny_bpe), "model-dir": str(tmp_path / "m"),
                            "max-token": 10})
    with pytest.raises(DepnmtError, match="'--max-tokens'.*max-tokens in"):
        depnmt.train_model({"data": str(tiny_bpe), "model-dir": str(tmp_path / "m"),
                            "max-tokens": 0})
    with pytest.raises(DepnmtError, match="Missing option '-i' / '--input'"):
        depnmt.train_model({"model-dir": str(tmp_path / "m")})
    cfg = tmp_path / "run.yaml"
    cfg.write_text("data: x\nlayer: 2\n", encoding="utf-8")
    with pytest.raises(DepnmtError, match=f"{cfg}:2: unknown option 'layer'"):
        depnmt.train_model(cfg)
    assert not (tmp_path / "m").exists()


def test_import_stays_cheap():
    """`import depnmt` and naming the API import neither torch nor depnmt.api's users."""
    code = ("import sys, depnmt; depnmt.Translator, depnmt.train_model; "
            "print(sorted(m for m in ('torch', 'click', 'depnmt.decoding.translate') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    assert {"Translator", "Translation", "train_model"} <= set(dir(depnmt))
    from depnmt.decoding.translate import Translation
    assert depnmt.Translation is Translation          # the type of an n-best entry
    with pytest.raises(AttributeError):
        depnmt.no_such_thing

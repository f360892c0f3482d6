"""`depnmt train --config FILE.yaml`: options from a YAML file (command-line flags win), the
errors it gives, and MODEL_DIR/train.yaml, the run's settings in a form --config reads back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

import depnmt
from depnmt.core.errors import DepnmtError

from .conftest import TINY_MODEL, overriding, run_cli


def metrics(model: Path) -> list[dict]:
    """The training losses and dev results of ``metrics.jsonl`` (no times or speeds)."""
    rows = [json.loads(line) for line in (model / "metrics.jsonl").read_text().splitlines()]
    keep = ("event", "step", "loss", "lr", "dev_nll", "dev_bleu", "dev_acc")
    return [{k: r[k] for k in keep if k in r} for r in rows if r["event"] in ("train", "valid")]


def config(model: Path) -> dict:
    return json.loads((model / "config.json").read_text())


def write_yaml(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


REL = ["--scheme", "abs+rel", "--rel-k", "3", "--dropout", "0.2", "--valid-every", "0",
       "--max-tokens", "150"]


def test_train_yaml_trains_the_same_model_again(tiny_bpe, tmp_path):
    """A run with flags writes train.yaml; `--config that -o other` gives the same model and
    scheme settings and, with the same seed, the same losses."""
    first, second = tmp_path / "first", tmp_path / "second"
    assert run_cli(["train", "-i", tiny_bpe, "-o", first, *overriding(TINY_MODEL, *REL),
                    "--max-steps", "4", "--seed", "7"]) == 0
    saved = yaml.safe_load((first / "train.yaml").read_text())
    assert saved["rel-k"] == 3 and saved["max-tokens"] == 150 and saved["seed"] == 7
    assert saved["encoder-layers"] == saved["decoder-layers"] == 1 and "layers" not in saved
    assert saved["output"] == str(first.resolve()) and "resume" not in saved
    assert "gps-layer" not in saved           # an option of a scheme the run does not use
    assert run_cli(["train", "--config", first / "train.yaml", "-o", second]) == 0
    a, b = config(first), config(second)
    for section in ("model", "training", "search", "parser", "subwords", "tokenizers"):
        assert a[section] == b[section], section
    assert metrics(first) == metrics(second) and metrics(first)


def test_command_line_wins_over_the_file(tiny_bpe, tmp_path):
    """Keys with dashes or underscores; a flag given beside --config overrides the file."""
    cfg = write_yaml(tmp_path / "run.yaml", {
        "data": str(tiny_bpe), "max_steps": 2, "dropout": 0.3, "layers": 1, "d-model": 32,
        "heads": 2, "d-ff": 64, "tie-embeddings": False, "device": "cpu", "valid-every": 0})
    model = tmp_path / "m"
    assert run_cli(["train", "--config", cfg, "-o", model, "--max-steps", "3"]) == 0
    saved = config(model)
    assert saved["training"]["max_steps"] == 3
    assert saved["model"]["dropout"] == 0.3 and saved["model"]["encoder_layers"] == 1
    assert saved["model"]["tie_decoder_embeddings"] is False


def test_unknown_key_names_the_file_and_a_close_match(tiny_bpe, tmp_path, capsys):
    cfg = write_yaml(tmp_path / "run.yaml", {"input": str(tiny_bpe), "max-token": 100})
    assert run_cli(["train", "--config", cfg, "-o", tmp_path / "m"]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {cfg}:2: unknown option 'max-token' (did you mean 'max-tokens'?)\n"
    assert not (tmp_path / "m").exists()


def test_bad_value_names_the_option_and_the_file(tiny_bpe, tmp_path, capsys):
    for value in (0, 1.5, "many"):
        cfg = write_yaml(tmp_path / "run.yaml", {"data": str(tiny_bpe), "max-tokens": value})
        assert run_cli(["train", "--config", cfg, "-o", tmp_path / "m"]) == 2
        err = capsys.readouterr().err
        assert "Invalid value for '--max-tokens'" in err and f"max-tokens in {cfg}:2" in err, err


def test_a_key_given_twice_names_both_lines(tiny_bpe, tmp_path, capsys):
    """YAML keeps the last of two values of one key and drops the first without a word: a
    --config file (train's, and any command's) giving a key twice is one error naming the
    file and both lines, and train_model() refuses it alike."""
    cfg = tmp_path / "run.yaml"
    cfg.write_text(f"input: {tiny_bpe}\nwarmup: 10\nmax-steps: 2\nwarmup: 20\n",
                   encoding="utf-8")
    for command in (["train", "--config", cfg, "-o", tmp_path / "m"],
                    ["bpe", "--config", cfg, "-o", tmp_path / "b"]):
        assert run_cli(command) == 2
        err = capsys.readouterr().err
        assert err == f"error: {cfg}:4: option 'warmup' is given twice (also at line 2)\n", err
    with pytest.raises(DepnmtError, match=f"{cfg}:4: option 'warmup' is given twice"):
        depnmt.train_model(cfg)
    assert not (tmp_path / "m").exists() and not (tmp_path / "b").exists()


def test_malformed_yaml_is_one_line_naming_the_file(tmp_path, capsys):
    for text in ("data: [unclosed\n", "- a list\n"):
        cfg = tmp_path / "run.yaml"
        cfg.write_text(text, encoding="utf-8")
        assert run_cli(["train", "--config", cfg, "-o", tmp_path / "m"]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {cfg}") and err.count("\n") == 1, err


def test_config_with_resume(tiny_bpe, tmp_path):
    """--resume keeps the saved values of options neither the file nor the command line give;
    the file's values count as given (a larger max-steps), a flag beats the file; train.yaml
    then records the resumed run's settings."""
    model = tmp_path / "m"
    assert run_cli(["train", "-i", tiny_bpe, "-o", model, *overriding(TINY_MODEL, *REL),
                    "--max-steps", "2"]) == 0
    cfg = write_yaml(tmp_path / "more.yaml", {"data": str(tiny_bpe), "max-steps": 3,
                                              "save-every": 5})
    assert run_cli(["train", "--config", cfg, "-o", model, "--resume"]) == 0
    saved = config(model)
    assert saved["training"]["max_steps"] == 3 and saved["training"]["save_every"] == 5
    assert saved["model"]["dropout"] == 0.2 and saved["training"]["max_tokens"] == 150
    assert saved["model"]["schemes"][1]["options"]["rel_k"] == 3
    assert run_cli(["train", "--config", model / "train.yaml", "--resume",
                    "--max-steps", "4"]) == 0
    assert config(model)["training"]["max_steps"] == 4
    assert yaml.safe_load((model / "train.yaml").read_text())["max-steps"] == 4
    steps = [m["step"] for m in metrics(model) if m["event"] == "train"]
    assert steps and max(steps) <= 4


def test_config_option_serves_any_command(tmp_path):
    """config_option() on another command: a list for an option given several times, a boolean
    flag, the command line winning, and config_settings writing what apply_config reads."""
    import click
    from click.testing import CliRunner

    from depnmt.commands.options import config_option, config_settings

    @click.command()
    @config_option()
    @click.option("--tag", multiple=True)
    @click.option("--size", type=click.IntRange(min=1), default=1)
    @click.option("--fast/--slow", default=False)
    def toy(tag, size, fast):
        click.echo(f"{list(tag)} {size} {fast}")

    cfg = write_yaml(tmp_path / "toy.yaml", {"tag": ["a", "b"], "size": 3, "fast": True})
    assert CliRunner().invoke(toy, ["--config", str(cfg)]).output == "['a', 'b'] 3 True\n"
    out = CliRunner().invoke(toy, ["--config", str(cfg), "--size", "5", "--slow"]).output
    assert out == "['a', 'b'] 5 False\n"
    settings = config_settings(toy, {"tag": ("x", "y"), "size": 2, "fast": None})
    assert settings == {"tag": ["x", "y"], "size": 2}
    again = write_yaml(tmp_path / "again.yaml", settings)
    assert CliRunner().invoke(toy, ["--config", str(again)]).output == "['x', 'y'] 2 False\n"


def test_a_training_start_builds_its_schemes_once(tiny_bpe, tmp_path, monkeypatch):
    """The schemes of a run are built once: checked, given the options they learn (GPS's label
    vocabulary), and the model is built from them."""
    from depnmt.model.schemes.base import Scheme

    from .conftest import import_random_trees
    trees = import_random_trees(tiny_bpe, tmp_path / "given", "parse-once", ("en",),
                                ["nsubj", "obj"], 5)
    built = []
    init = Scheme.__init__

    def counted(self, **options):
        built.append(type(self).name)
        init(self, **options)

    monkeypatch.setattr(Scheme, "__init__", counted)
    assert run_cli(["train", "-i", tiny_bpe, "-t", trees, "-o", tmp_path / "m", *TINY_MODEL,
                    "--scheme", "abs+gps", "--max-steps", "1"]) == 0
    assert sorted(built) == ["abs", "gps"]

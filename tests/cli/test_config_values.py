"""Bad input, class "config files": a list or a mapping where an option takes one value is one
error naming the option and the file (was a ``TypeError`` traceback), said without printing
the value — a YAML alias bomb (a few lines that expand to gigabytes) stops at once, in small
memory — on the command line's ``--config`` and through ``train_model`` alike."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from depnmt.core.errors import DepnmtError

from .conftest import run_cli

# 9^9 (387 million) strings once expanded, a few hundred bytes as written
BOMB = "scheme: [&a [x, x, x, x, x, x, x, x, x], " + ", ".join(
    f"&{a} [{', '.join([f'*{b}'] * 9)}]" for b, a in zip("abcdefgh", "bcdefghi")) + "]\n"


@pytest.mark.parametrize("text,flag,kind", [
    ("lr: [1, 2]\n", "--lr", "a list"), ("scheme: {a: 1}\n", "--scheme", "a mapping"),
    ("max-tokens: [4096]\n", "--max-tokens", "a list"),
    ("seed: &s [1]\nwarmup: *s\n", "--seed", "a list")])
def test_a_list_or_mapping_for_one_value_is_one_error(text, flag, kind, tmp_path, capsys):
    config = tmp_path / "train.yaml"
    config.write_text(text, encoding="utf-8")
    assert run_cli(["train", "-i", tmp_path / "bpe", "-o", tmp_path / "m", "--config",
                    config]) == 2
    err = capsys.readouterr().err
    assert f"Invalid value for '{flag}' ({flag[2:]} in {config}:1): {kind} where one value " \
           f"belongs" in err, err


def test_the_api_says_the_same(tmp_path):
    from depnmt.api import train_model
    with pytest.raises(DepnmtError, match="'--lr'.*a list where one value belongs"):
        train_model({"input": str(tmp_path / "bpe"), "output": str(tmp_path / "m"),
                     "lr": [1, 2]})


def test_a_yaml_alias_bomb_stops_at_once(tmp_path):
    config = tmp_path / "train.yaml"
    config.write_text(BOMB, encoding="utf-8")
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "depnmt.cli", "train", "-i", tmp_path / "bpe",
                           "-o", tmp_path / "m", "--config", config], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"Invalid value for '--scheme' (scheme in {config}:1): a list where one value " \
           f"belongs" in done.stderr
    assert time.monotonic() - start < 60

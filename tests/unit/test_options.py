"""Numeric options have ranges: a nonsense value is a usage error naming the option (exit 2),
for every command, the scheme flags of `train` included."""

from __future__ import annotations

import click
import pytest

from depnmt.cli import COMMANDS, cli, main

# numeric options that take any value (none so far): (command path, option name)
UNBOUNDED: set[tuple[str, str]] = set()


def run(args: list[str]) -> int:
    try:
        main([str(a) for a in args])
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def commands() -> list[tuple[list[str], click.Command]]:
    """(path, command) of every command and subcommand."""
    ctx = click.Context(cli)
    out = []
    for name in COMMANDS:
        command = cli.get_command(ctx, name)
        if isinstance(command, click.Group):
            out += [([name, sub], command.commands[sub]) for sub in command.commands]
        else:
            out.append(([name], command))
    return out


def numeric_options() -> list[tuple[list[str], click.Option]]:
    return [(path, p) for path, command in commands() for p in command.params
            if isinstance(p, click.Option)
            and isinstance(p.type, (click.types.IntParamType, click.types.FloatParamType))]


def outside(kind: click.types.ParamType) -> list[str]:
    """Values just outside a range type's bounds."""
    step = 1 if isinstance(kind, click.IntRange) else 0.5
    values = []
    if kind.min is not None:
        values.append(kind.min if kind.min_open else kind.min - step)
    if kind.max is not None:
        values.append(kind.max if kind.max_open else kind.max + step)
    return [str(v) for v in values]


def long_flag(option: click.Option) -> str:
    return max(option.opts, key=len)


def test_every_numeric_option_has_a_range():
    options = numeric_options()
    assert len(options) > 40                       # the scheme flags of train included
    loose = [(" ".join(path), long_flag(p)) for path, p in options
             if not isinstance(p.type, (click.IntRange, click.FloatRange))
             and (" ".join(path), long_flag(p)) not in UNBOUNDED]
    assert loose == []


@pytest.mark.parametrize("path, option", numeric_options(),
                         ids=lambda x: long_flag(x) if isinstance(x, click.Option) else x[-1])
def test_out_of_range_values_are_usage_errors(path, option, capsys):
    if not isinstance(option.type, (click.IntRange, click.FloatRange)):
        pytest.skip("unbounded (UNBOUNDED)")
    for value in outside(option.type):
        assert run([*path, long_flag(option), value]) == 2
        err = capsys.readouterr().err
        assert f"Invalid value for '{long_flag(option)}'" in err or \
               f"/ '{long_flag(option)}'" in err, err


@pytest.mark.parametrize("args, flag", [
    (["translate", "--beam", "0"], "--beam"),
    (["translate", "--beam", "-3"], "--beam"),
    (["translate", "--max-len-a", "-1"], "--max-len-a"),
    (["translate", "--max-len-b", "-5"], "--max-len-b"),
    (["translate", "--alpha", "-0.5"], "--alpha"),
    (["train", "--heads", "0"], "--heads"),
    (["train", "--layers", "0"], "--layers"),
    (["train", "--dropout", "1.5"], "--dropout"),
    (["train", "--label-smoothing", "-0.1"], "--label-smoothing"),
    (["train", "--lr", "0"], "--lr"),
    (["train", "--max-tokens", "0"], "--max-tokens"),
    (["train", "--update-freq", "0"], "--update-freq"),
    (["train", "--log-every", "0"], "--log-every"),
    (["train", "--seed", "-1"], "--seed"),
    (["train", "--gps-layers", "first"], "--gps-layers"),
    (["train", "--pascal-layers", "-1"], "--pascal-layers"),
    (["score", "--seed", "-1", "x"], "--seed"),
    (["parse", "--shard", "2/2", "-o", "x"], "--shard"),
])
def test_nonsense_values_from_the_issue(args, flag, capsys):
    assert run(args) == 2
    err = capsys.readouterr().err
    assert "Usage:" in err and f"'{flag}'" in err, err


def test_cross_option_checks(tmp_path, capsys):
    assert run(["train", "-i", tmp_path, "-o", tmp_path / "m", "--d-model", "30",
                "--heads", "4"]) == 2
    assert "--d-model 30 is not a multiple of --heads 4" in capsys.readouterr().err
    assert run(["prepare", "--corpus", "multi30k", "-o", tmp_path, "--min-len", "5",
                "--max-len", "3"]) == 2
    assert "--min-len 5 is above --max-len 3" in capsys.readouterr().err

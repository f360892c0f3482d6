"""The CLI grammar: one meaning per flag across every `depnmt` command (`-i/--input`,
`-o/--output`, `-m/--model`, ...), and the 0.1.0 spellings of the renamed options
(``DEPRECATED`` in depnmt/commands/options.py): hidden, still working, one warning line."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import click
import pytest
from click.core import ParameterSource
from click.testing import CliRunner

from depnmt.cli import cli
from depnmt.commands.options import DEPRECATED, DeprecatedAlias
from depnmt.core.errors import DepnmtError

# short flag -> the one long flag it goes with, in every command that has it
GRAMMAR = {"-i": "--input", "-o": "--output", "-m": "--model", "-c": "--checkpoint",
           "-t": "--trees", "-l": "--lang", "-r": "--ref", "-s": "--system", "-f": "--runs-dir",
           "-b": "--baseline"}
# (command, long flag) spelled as a flag of the grammar without its short flag, for another
# thing: a parser backend's model and language names (per side in parse), not a model folder
# of `depnmt train` or the language of the references
OTHER_MEANING = {("parse", "--model"), ("parse", "--lang"),
                 ("analyze uas", "--model"), ("analyze uas", "--lang")}
WARNING = "warning: {old} is deprecated; use {new} (the old spelling goes in 0.3.0)\n"


def all_commands(group: click.Group = cli, prefix: str = "") -> dict[str, click.Command]:
    """Every command and subcommand of ``group`` by its path ("analyze awsl")."""
    ctx = click.Context(group)
    found = {}
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        path = f"{prefix}{name}"
        if isinstance(command, click.Group):
            found.update(all_commands(command, f"{path} "))
        else:
            found[path] = command
    return found


COMMANDS = all_commands()


def visible_options(command: click.Command) -> list[click.Option]:
    """The options ``--help`` shows (no deprecated alias)."""
    return [p for p in command.params if isinstance(p, click.Option) and not p.hidden
            and not isinstance(p, DeprecatedAlias)]


def flags(option: click.Option) -> tuple[str | None, str]:
    """(short flag or None, first long flag) of ``option``."""
    shorts = [o for o in option.opts if re.fullmatch(r"-\w", o)]
    return (shorts[0] if shorts else None), next(o for o in option.opts if o.startswith("--"))


def meanings(pick) -> dict[str, dict[str, list[str]]]:
    """flag -> {what it goes with -> commands}, over every visible option of every command;
    ``pick(command, short, long)`` gives (flag, partner) or None to skip."""
    found: dict[str, dict] = defaultdict(lambda: defaultdict(list))
    for path, command in COMMANDS.items():
        for option in visible_options(command):
            short, long = flags(option)
            picked = pick(path, short, long)
            if picked is not None:
                found[picked[0]][picked[1]].append(path)
    return found


def test_the_walk_sees_every_command_and_subcommand():
    assert {"train", "translate", "score", "analyze awsl", "analyze uas",
            "models download"} <= set(COMMANDS)


def test_a_short_flag_means_one_option_in_every_command():
    found = meanings(lambda path, short, long: (short, long) if short else None)
    clashes = {short: dict(longs) for short, longs in found.items() if len(longs) > 1}
    assert not clashes, f"short flags with several meanings: {clashes}"


def test_the_short_flags_of_the_grammar_go_with_their_long_flags():
    wrong = [(path, short, long) for path, command in COMMANDS.items()
             for short, long in map(flags, visible_options(command))
             if short in GRAMMAR and long != GRAMMAR[short]]
    assert not wrong, f"(command, short, long) against the grammar: {wrong}"


def test_a_long_flag_has_its_short_flag_everywhere_or_nowhere():
    found = meanings(lambda path, short, long: None if (path, long) in OTHER_MEANING
                     else (long, short or "(none)"))
    clashes = {long: dict(shorts) for long, shorts in found.items() if len(shorts) > 1}
    assert not clashes, f"long flags with several spellings: {clashes}"


# -- the deprecated aliases -------------------------------------------------------------------
ALIASES = [(path, old, new) for path, table in DEPRECATED.items() for old, new in table.items()]


def alias_of(path: str, old: str) -> DeprecatedAlias:
    """The hidden option ``old`` of the command ``path``."""
    found = [p for p in COMMANDS[path].params if isinstance(p, DeprecatedAlias) and p.old == old]
    assert len(found) == 1, f"{path} has {len(found)} options {old}"
    return found[0]


def sample_value(param: click.Parameter, tmp_path: Path) -> str:
    """A value ``param`` accepts that is not its default: an existing folder or file for a
    path, a choice, else a word."""
    if isinstance(param.type, click.Path):
        if not param.type.file_okay:
            (tmp_path / "folder").mkdir(exist_ok=True)
            return str(tmp_path / "folder")
        (tmp_path / "file").write_text("x\n")
        return str(tmp_path / "file")
    if isinstance(param.type, click.Choice):
        return str(param.type.choices[-1])
    return "chrf"


def required_args(command: click.Command, skip: click.Parameter, tmp_path: Path) -> list[str]:
    """Arguments that satisfy ``command``'s required options and arguments but ``skip``."""
    options, arguments = [], []
    for param in command.params:
        if param.required and param is not skip:
            if isinstance(param, click.Argument):
                arguments.append(sample_value(param, tmp_path))
            else:
                options += [param.opts[0], sample_value(param, tmp_path)]
    return options + arguments


def parse(command: click.Command, args: list[str]) -> click.Context:
    return command.make_context(command.name, list(args))


@pytest.mark.parametrize("path, old, new", ALIASES, ids=[f"{p}:{o}" for p, o, _ in ALIASES])
def test_an_old_spelling_gives_the_same_value_with_one_warning_line(path, old, new, tmp_path,
                                                                   capsys):
    command, target = COMMANDS[path], alias_of(path, old).target
    value = sample_value(target, tmp_path)
    rest = required_args(command, target, tmp_path)
    ctx_new = parse(command, [new.split("/")[-1], value, *rest])
    assert capsys.readouterr().err == ""
    ctx_old = parse(command, [old, value, *rest])
    assert capsys.readouterr().err == WARNING.format(old=old, new=new)
    assert ctx_old.params[target.name] == ctx_new.params[target.name]
    for ctx in (ctx_old, ctx_new):
        assert ctx.get_parameter_source(target.name) is ParameterSource.COMMANDLINE


@pytest.mark.parametrize("path, old, new", ALIASES, ids=[f"{p}:{o}" for p, o, _ in ALIASES])
def test_an_option_given_in_both_spellings_is_a_usage_error_naming_both(path, old, new,
                                                                       tmp_path):
    command, target = COMMANDS[path], alias_of(path, old).target
    value = sample_value(target, tmp_path)
    args = [old, value, new.split("/")[0], value, *required_args(command, target, tmp_path)]
    with pytest.raises(click.UsageError) as caught:
        parse(command, args)
    assert old in caught.value.message and new in caught.value.message


@pytest.mark.parametrize("path, old", [(p, o) for p, o, _ in ALIASES],
                         ids=[f"{p}:{o}" for p, o, _ in ALIASES])
def test_help_does_not_show_an_old_spelling(path, old):
    result = CliRunner().invoke(cli, [*path.split(), "--help"])
    assert result.exit_code == 0, result.output
    assert not re.search(rf"(?<![\w-]){re.escape(old)}(?![\w-])", result.output), result.output


def test_every_hidden_option_is_an_alias_of_the_table_or_a_deprecated_option():
    """Hidden options are the table's aliases, or old options with a meaning of their own
    (train's 0-based --gps-layers: a conversion, not a second spelling), said deprecated."""
    hidden = {(path, p.opts[0]): p for path, command in COMMANDS.items()
              for p in command.params if isinstance(p, click.Option) and p.hidden}
    aliases = {(path, old) for path, old, _ in ALIASES}
    assert aliases <= set(hidden)
    others = {key: p.help for key, p in hidden.items() if key not in aliases}
    assert all("deprecated" in (text or "") for text in others.values()), others


def test_an_old_train_yaml_key_still_configures_train_with_a_warning(tmp_path, capsys):
    command = COMMANDS["train"]
    old = tmp_path / "old.yaml"
    old.write_text(f"data: {tmp_path}\nmodel-dir: {tmp_path / 'model'}\n")
    new = tmp_path / "new.yaml"
    new.write_text(f"input: {tmp_path}\noutput: {tmp_path / 'model'}\n")
    ctx_new = parse(command, ["--config", str(new)])
    assert capsys.readouterr().err == ""
    ctx_old = parse(command, ["--config", str(old)])
    assert capsys.readouterr().err.splitlines() == [
        f"warning: {old}:1: 'data' is deprecated; use 'input' (the old spelling goes in 0.3.0)",
        f"warning: {old}:2: 'model-dir' is deprecated; use 'output' (the old spelling goes in "
        f"0.3.0)"]
    for name in ("data_dir", "model_dir"):
        assert ctx_old.params[name] == ctx_new.params[name]


def test_a_config_key_given_in_both_spellings_is_an_error_naming_both(tmp_path):
    both = tmp_path / "both.yaml"
    both.write_text(f"data: {tmp_path}\ninput: {tmp_path}\noutput: {tmp_path / 'model'}\n")
    with pytest.raises(DepnmtError, match=r"'input' is given twice \(also as 'data'\)"):
        parse(COMMANDS["train"], ["--config", str(both)])


def test_every_path_of_every_command_refuses_an_empty_string():
    """``-o "$OUT"`` with ``OUT`` unset passes ``""``, which ``Path`` reads as the current
    folder: every file or folder argument and option is a GivenPath, a usage error for ``""``."""
    from depnmt.commands.fields import GivenPath
    paths = [(name, p) for name, command in COMMANDS.items() for p in command.params
             if isinstance(p.type, click.Path)]
    assert len(paths) > 60
    assert [(name, p.name) for name, p in paths if not isinstance(p.type, GivenPath)] == []


@pytest.mark.parametrize("args", [["prepare", "--src-lang", "en", "--tgt-lang", "de", "-o", ""],
                                  ["translate", "-m", "", "-i", "x.txt"],
                                  ["archive", "", "-o", "out"]])
def test_an_empty_path_is_a_usage_error_naming_the_flag(args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2 and list(tmp_path.iterdir()) == []
    assert "an empty path (an unset shell variable?); '.' is the current folder" in result.output

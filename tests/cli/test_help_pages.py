"""The ``--help`` pages: rendered by rich-click in titled option sections, plain text without
a terminal, the worked example at the end, no internal issue numbers or dated status notes,
and no heavy import for the help of a light command."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from click.testing import CliRunner

from depnmt.cli import cli
from depnmt.commands.examples import epilog
from depnmt.commands.helpgroups import OPTION_GROUPS, option_panels

from .test_help_examples import command_paths, resolve

PATHS = ["", *command_paths()]
INTERNAL = [re.compile(r"\bissues? \d+", re.I), re.compile(r"#\d+"),
            re.compile(r"\b(19|20)\d\d-\d\d-\d\d\b"), re.compile(r"\b(19|20)\d\d-\d\d-\d[x\d]\b")]


def help_text(path: str) -> str:
    """``depnmt PATH --help`` as a pipe gets it (no terminal)."""
    result = CliRunner().invoke(cli, [*path.split(), "--help"])
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p or "depnmt")
def test_help_is_plain_and_ends_with_the_example(path):
    text = help_text(path)
    assert "\x1b" not in text and "╭" not in text and "│" not in text
    assert not any(line != line.rstrip() for line in text.splitlines())
    example = epilog(path).replace("\b\n", "")
    assert text.rstrip().endswith(example), text[-600:]


def test_help_in_a_pipe_is_plain_on_ci_runners_too():
    """rich-click forces colours where GITHUB_ACTIONS is set; depnmt's help does not."""
    env = {**os.environ, "GITHUB_ACTIONS": "true", "PY_COLORS": "1"}
    env.pop("FORCE_COLOR", None)
    out = subprocess.run([sys.executable, "-m", "depnmt.cli", "bpe", "--help"], env=env,
                         capture_output=True, text=True, check=True).stdout
    assert "--merges" in out and "\x1b" not in out


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p or "depnmt")
def test_help_names_no_issue_number_or_dated_status(path):
    text = help_text(path)
    found = [m.group(0) for pattern in INTERNAL for m in pattern.finditer(text)]
    assert not found, f"depnmt {path} --help: {found}"


def test_the_internal_patterns_catch_what_they_should():
    for bad in ("see issue 12", "fixed in #341", "status 2026-11-25", "as of 2026-11-2x"):
        assert any(pattern.search(bad) for pattern in INTERNAL), bad
    for fine in ("# joint BPE", "--max-steps 2000", "sha256", "Omote et al. (2019)"):
        assert not any(pattern.search(fine) for pattern in INTERNAL), fine


def test_train_help_groups_every_option_into_its_sections():
    """Every section of train (its scheme options per scheme included) is shown, in order,
    and no visible option is left in the catch-all "Options" section."""
    text = help_text("train")
    titles = [panel.name for panel in option_panels("train")]
    assert len(titles) > len(OPTION_GROUPS["train"]) and "Scheme options: gps" in titles
    positions = [text.index(f"\n{title}:\n") for title in titles]
    assert positions == sorted(positions)
    catch_all = text[text.index("\nOptions:\n"):text.rindex("\nExample")]
    assert catch_all.split() == ["Options:", "-h,", "--help", "Show", "this", "message", "and",
                                 "exit."]


def test_every_grouped_name_is_an_option_of_its_command():
    """A section naming an option that its command does not have (a renamed parameter) fails
    here instead of silently showing fewer options in the section."""
    for path in OPTION_GROUPS:
        names = {p.name for p in resolve(path).params}
        for panel in option_panels(path):
            assert set(panel.options) <= names, (path, panel.name, set(panel.options) - names)


def test_top_level_help_lists_commands_without_importing_them():
    code = ("import sys\nfrom depnmt.cli import main\n"
            "for args in (['--help'], ['score', '--help']):\n"
            "    try:\n        main(args)\n    except SystemExit:\n        pass\n"
            "print('torch' in sys.modules, 'depnmt.commands.train' in sys.modules,"
            " file=sys.stderr)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stderr.split() == ["False", "False"]
    assert re.search(r"\n  prepare +Read, normalise, tokenize", result.stdout)
    assert "Examples:\n  # a first system" in result.stdout

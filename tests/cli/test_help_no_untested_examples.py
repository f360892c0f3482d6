"""Every command line a ``--help`` page shows is one that runs in a test: the worked example
of ``depnmt/commands/examples.py`` (``test_help_examples.py`` runs each of them). A command
line written into a docstring (``depnmt ...``, ``torchrun ... depnmt ...``) would be shown
untested, and silently go stale when a flag changes."""

from __future__ import annotations

import re

import pytest

from depnmt.commands.examples import read_commands

from .test_help_examples import example_lines
from .test_help_pages import PATHS, help_text

COMMAND_LINE = re.compile(r"^(depnmt\s|torchrun\s.*\bdepnmt\b)")


def shown_commands(text: str) -> list[str]:
    """The command lines of a help text, each as one string: a line starting with ``depnmt``
    (or ``torchrun ... depnmt``), with the lines it continues onto (`` \\``) joined."""
    return read_commands(text.splitlines(), COMMAND_LINE.match)


def test_shown_commands_finds_commands_and_joins_continued_lines():
    text = ("Prose mentioning `depnmt parse` and depnmt's folders.\n\n"
            "  depnmt train -i a \\\n    -o b\n"
            "  torchrun --nproc_per_node 4 -m depnmt.cli train -i a ...\n"
            "depnmt is not a command here\n")
    assert shown_commands(text) == [
        "depnmt train -i a -o b", "torchrun --nproc_per_node 4 -m depnmt.cli train -i a ...",
        "depnmt is not a command here"]


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p or "depnmt")
def test_help_shows_only_commands_that_a_test_runs(path):
    tested = set(example_lines())
    untested = [line for line in shown_commands(help_text(path)) if line not in tested]
    assert not untested, f"depnmt {path} --help shows command lines no test runs: {untested}"

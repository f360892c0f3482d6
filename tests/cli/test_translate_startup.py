"""``depnmt translate`` imports only what the model and the input need: its start-up time is
torch's import and the model's load, not the tokenizer's or a parser's."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("sacremoses", "matplotlib", "spacy", "stanza", "sudachipy", "ginza", "ctranslate2")
DRIVER = """
import json, sys
from depnmt.cli import cli
try:
    cli.main(sys.argv[1:], prog_name="depnmt", standalone_mode=False)
finally:
    print("IMPORTED", json.dumps(sorted(m for m in {heavy!r} if m in sys.modules)),
          file=sys.stderr)
"""


def imported(model, stdin: str) -> list[str]:
    """The heavy packages a fresh ``depnmt translate -m MODEL`` process imported."""
    done = subprocess.run([sys.executable, "-c", DRIVER.format(heavy=HEAVY), "translate", "-m",
                           str(model), "--device", "cpu"], input=stdin, capture_output=True,
                          text=True, check=True)
    line = next(l for l in done.stderr.splitlines() if l.startswith("IMPORTED"))
    return json.loads(line.split(" ", 1)[1])


@pytest.mark.parametrize("stdin, expected", [("", []), ("A man is sleeping .\n", ["sacremoses"])])
def test_translate_imports_the_tokenizer_only_for_input(tiny_model, stdin, expected):
    """An abs model with the Moses tokenizer: no input, no sacremoses (0.3 s of regular
    expressions); a line of input imports it, and never a parser, plotting or CTranslate2."""
    assert imported(tiny_model, stdin) == expected

"""``depnmt translate`` imports only what the model and the input need: its start-up time is
torch's import and the model's load, not the tokenizer's or a parser's."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("sacremoses", "matplotlib", "spacy", "stanza", "sudachipy", "ginza", "ctranslate2",
         "torch._dynamo")
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
    """The heavy modules a fresh ``depnmt translate -m MODEL`` process imported."""
    done = subprocess.run([sys.executable, "-c", DRIVER.format(heavy=HEAVY), "translate", "-m",
                           str(model), "--device", "cpu"], input=stdin, capture_output=True,
                          text=True, check=True)
    line = next(l for l in done.stderr.splitlines() if l.startswith("IMPORTED"))
    return json.loads(line.split(" ", 1)[1])


@pytest.mark.parametrize("stdin, expected", [("", []), ("A man is sleeping .\n", ["sacremoses"])])
def test_translate_imports_the_tokenizer_only_for_input(tiny_model, stdin, expected):
    """An abs model with the Moses tokenizer: no input, no sacremoses (0.3 s of regular
    expressions); a line of input imports it, and never a parser, plotting, CTranslate2 or
    torch's compiler (torch._dynamo: 0.8–1.7 s; checking the checkpoint against a model built on
    the meta device imported it)."""
    assert imported(tiny_model, stdin) == expected


CONSOLE = """
import atexit, gc, sys
from depnmt.cli import main
atexit.register(lambda: print("GC", gc.isenabled(), gc.get_freeze_count(), file=sys.stderr))
sys.argv = ["depnmt", *sys.argv[1:]]
main()
"""


def test_the_console_process_freezes_its_startup_objects_and_keeps_the_collector(tiny_model):
    """The console script (``main()`` without argv) loads torch and the model with the cyclic
    collector paused, freezes what start-up made (gc.freeze: not scanned again, at exit
    neither), and runs with the collector on."""
    done = subprocess.run([sys.executable, "-c", CONSOLE, "translate", "-m", str(tiny_model),
                           "--device", "cpu"], input="", capture_output=True, text=True,
                          check=True)
    _, enabled, frozen = next(l for l in done.stderr.splitlines() if l.startswith("GC")).split()
    assert enabled == "True" and int(frozen) > 100_000     # torch alone makes ~10^6 objects


def test_a_caller_passing_argv_keeps_its_own_collector():
    """Tests and programs that call ``main(argv)`` in their own process: no freeze."""
    import gc

    from depnmt.core.heap import startup_objects
    before = gc.get_freeze_count()
    with startup_objects():
        assert gc.isenabled()
    assert gc.get_freeze_count() == before and gc.isenabled()


def test_a_loaded_model_keeps_its_output_projection_tied_to_the_target_embedding(tiny_model):
    """Loading assigns the checkpoint's tensors (no copies); the tie is made again after."""
    from depnmt.decoding.translate import Translator
    model = Translator.from_model_dir(tiny_model, device="cpu").model
    assert model.output.weight is model.tgt_embed.weight
    assert len(list(model.parameters())) == len(model.state_dict()) - 1

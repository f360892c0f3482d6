"""Bad input, class "the Python API": ``Translator.translate`` checks its search options as the
command line does (a beam of 0, -1 or 2.5, a length limit that is not a finite number in range:
a ``DepnmtError`` naming the option, where it decoded greedily or ended in a torch error) and
its sentences' type (a ``TypeError`` naming the sentence); the command line bounds the same
options (``--beam``, ``--max-len-a``, ``--max-len-b``)."""

from __future__ import annotations

import pytest

from depnmt.api import Translator
from depnmt.errors import DepnmtError

from .conftest import run_cli


@pytest.fixture(scope="module")
def translator(tiny_model):
    return Translator.load(tiny_model, device="cpu")


@pytest.mark.parametrize("option,value", [
    ("beam", 0), ("beam", -1), ("beam", 2.5), ("beam", True), ("beam", 10 ** 6),
    ("max_len_a", float("nan")), ("max_len_a", float("inf")), ("max_len_b", 10 ** 9),
    ("alpha", -1.0)])
def test_bad_search_options_are_errors_naming_the_option(translator, option, value):
    with pytest.raises(DepnmtError, match=f"^{option} "):
        translator.translate(["a dog runs ."], **{option: value})
    assert translator.translate(["a dog runs ."], beam=2)          # the defaults are restored


@pytest.mark.parametrize("sentence", [None, 3, b"a dog", ["a", "dog"]])
def test_a_sentence_that_is_no_text_is_a_type_error_naming_it(translator, sentence):
    with pytest.raises(TypeError, match=r"translate\(\): sentence 1 is"):
        translator.translate(["a dog runs .", sentence])


@pytest.mark.parametrize("flag,value", [("--beam", "0"), ("--beam", "100000"),
                                        ("--max-len-b", "1000000000"), ("--max-len-a", "1e9")])
def test_the_command_line_bounds_the_same_options(flag, value, tiny_model, tmp_path, capsys):
    source = tmp_path / "in.txt"
    source.write_text("a dog runs .\n", encoding="utf-8")
    assert run_cli(["translate", "-m", tiny_model, "-i", source, flag, value]) == 2
    assert f"Invalid value for '{flag}'" in capsys.readouterr().err

"""Bad input, class "the Python API": ``Translator.translate`` checks its search options as the
command line does (a beam of 0, -1 or 2.5, a length limit that is not a finite number in range:
a ``DepnmtError`` naming the option, where it decoded greedily or ended in a torch error) and
its sentences' type (a ``TypeError`` naming the sentence); the command line bounds the same
options (``--beam``, ``--max-len-a``, ``--max-len-b``). ``train_model`` and ``Translator.load``
given something that is no config, folder or model directory say so (not an error from deep
inside)."""

from __future__ import annotations

import pytest

from depnmt.api import Translator
from depnmt.core.errors import DepnmtError

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


@pytest.mark.parametrize("config", [None, 42, ["input", "work/bpe"]])
def test_train_model_takes_a_mapping_or_a_path(config):
    from depnmt.api import train_model
    with pytest.raises(TypeError, match=r"^train_model\(\) takes a dict of train options or the "
                                        r"path of a YAML file, not "):
        train_model(config)


def test_a_folder_option_that_is_no_path_names_the_option(tmp_path):
    from depnmt.api import train_model
    with pytest.raises(DepnmtError, match=r"^Invalid value for '--input' \(input in the "
                                          r"train_model\(\) config\): expected a folder's path, "
                                          r"not int 5"):
        train_model({"input": 5, "output": str(tmp_path / "m")})


@pytest.mark.parametrize("model_dir", [None, 3, [], ["a", None]])
def test_load_takes_a_model_directory_or_a_list_of_them(model_dir):
    with pytest.raises(TypeError, match=r"^load\(\) needs a model directory \(or a list of "
                                        r"them\), not "):
        Translator.load(model_dir)

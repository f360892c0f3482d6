"""Search options are declared once (depnmt/core/searchlimits.py): a field of ``SearchConfig`` gives
translate's flag, train's search default (``--config``, ``train.yaml``), the keyword of the
Python API, the saved ``config.json`` and its check. Adding one, as a subclass with one more
field, is all it takes."""

from __future__ import annotations

import importlib
from dataclasses import asdict, dataclass, fields

import pytest
from click.testing import CliRunner

import depnmt
import depnmt.commands.translate as translate_command
from depnmt.core import searchlimits
from depnmt.core.errors import DepnmtError
from depnmt.core.optionspec import COUNT
from depnmt.core.searchlimits import SearchConfig, search_option
from depnmt.storage.modeldir import SEARCH_FIELDS, SECTIONS, check_sections
from depnmt.training.config import from_params, parse_values


@dataclass
class WithTopK(SearchConfig):
    """The search settings and one more: what adding an option is."""

    topk: int = search_option(0, "sample among the K best tokens (0 = off)", COUNT,
                              train="default top-k of translate", metavar="K")


@pytest.fixture
def topk(monkeypatch):
    """``--topk`` declared as one more search field; translate's command rebuilt with it, and
    rebuilt as it was afterwards."""
    monkeypatch.setattr(searchlimits, "SearchConfig", WithTopK)
    yield importlib.reload(translate_command)
    monkeypatch.undo()
    importlib.reload(translate_command)


def test_every_search_option_is_a_flag_a_keyword_and_a_config_json_key():
    names = [f.name for f in fields(SearchConfig)]
    assert list(searchlimits.search_names()) == names
    assert list(SEARCH_FIELDS) == names
    assert {p.name for p in translate_command.command.params} >= set(names)
    assert [p.name for p in searchlimits.search_params("train")] == [
        "search_beam", "search_alpha", "search_length_penalty"]


def test_a_new_field_is_a_translate_flag_with_its_help_and_check(topk, monkeypatch):
    seen = {}
    monkeypatch.setattr(topk, "translate_with_model", lambda flags, search: seen.update(search))
    runner = CliRunner()
    result = runner.invoke(topk.command, ["--topk", "3", "--beam", "5"])
    assert result.exit_code == 0, result.output
    assert seen["topk"] == 3 and seen["beam"] == 5 and seen["alpha"] is None
    result = runner.invoke(topk.command, ["--topk", "-1"])
    assert result.exit_code == 2 and "Invalid value for '--topk'" in result.output
    text = " ".join(runner.invoke(topk.command, ["--help"]).output.split())
    assert "--topk K sample among the K best tokens (0 = off) [default: (the model's, set by " \
           "train --topk); x>=0]" in text


def test_a_new_field_is_a_train_config_key_and_saved(topk, tmp_path):
    values = {"input": str(tmp_path / "bpe"), "output": str(tmp_path / "model"), "topk": 3}
    run = from_params(*parse_values(values, "run.yaml"))
    assert isinstance(run.search, WithTopK) and run.search.topk == 3
    assert run.settings["topk"] == 3                                 # train.yaml
    record = {"search": asdict(run.search)}                          # config.json's search
    assert record["search"]["topk"] == 3
    check_sections(tmp_path, record, {"search": SECTIONS["search"]}, "")
    with pytest.raises(DepnmtError, match=r'"search.topk" should be an integer'):
        check_sections(tmp_path, {"search": {"topk": 1.5}}, {"search": SECTIONS["search"]}, "")
    with pytest.raises(DepnmtError, match="Invalid value for '--topk' \\(topk in run.yaml\\)"):
        parse_values({**values, "topk": -2}, "run.yaml")
    with pytest.raises(DepnmtError, match="topk -2: -2 is not in the range x>=0"):
        WithTopK(topk=-2)


class Impl:
    """What :class:`depnmt.Translator` wraps, recording the search of each call."""

    def __init__(self):
        self.search_cfg, self.seen = searchlimits.search_config(), []

    def translate_lines(self, sentences, nbest=0):
        self.seen.append(self.search_cfg)
        return sentences


def test_a_new_field_is_an_api_keyword(topk):
    translator = depnmt.Translator(Impl())
    assert translator.search.topk == 0
    translator.translate(["a"], topk=5)
    assert translator._translator.seen[-1].topk == 5 and translator.search.topk == 0
    with pytest.raises(TypeError, match="unknown search option.*expected beam, .*topk"):
        translator.translate(["a"], top_k=5)


def test_without_the_field_the_api_refuses_it():
    with pytest.raises(TypeError, match="unknown search option"):
        depnmt.Translator(Impl()).translate(["a"], topk=5)


def test_a_search_setting_of_the_wrong_json_type_is_named(tmp_path):
    """A hand-edited config.json: a string setting given a number is one error line."""
    with pytest.raises(DepnmtError, match=r'"search.at_limit" should be a string, found 5'):
        check_sections(tmp_path, {"search": {"at_limit": 5}}, {"search": SECTIONS["search"]}, "")

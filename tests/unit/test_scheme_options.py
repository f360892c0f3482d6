"""Scheme options (depnmt/model/schemes/options.py, registry.py): one dataclass per scheme,
flags generated from it (depnmt/commands/fields.py), one meaning per option name, per-scheme
options in the model config."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from depnmt.commands.fields import click_option
from depnmt.model.schemes.base import Scheme
from depnmt.model.schemes.options import IntRange, SubwordTreeOptions, option
from depnmt.model.schemes.registry import (OPTION_FIELDS, SCHEMES, declared_options, learn_options,
                                           register, scheme_entries, with_learned)
from depnmt.model.schemes.relative import ShawOptions
from depnmt.training.config import scheme_option_params


def test_two_meanings_of_one_option_name_are_refused_at_registration():
    @dataclass
    class Clash:
        rel_k: int = option(5, "another k", IntRange(min=0))

    class Other(Scheme):
        name = "clash_test"
        Options = Clash

    before = dict(OPTION_FIELDS)
    with pytest.raises(TypeError, match="'rel_k', which scheme 'rel' declares differently"):
        register(Other)
    assert "clash_test" not in SCHEMES and OPTION_FIELDS == before


def test_a_shared_options_class_is_one_declaration():
    @dataclass
    class Shared(SubwordTreeOptions, ShawOptions):
        pass

    class Sharing(Scheme):
        name = "sharing_test"
        Options = Shared

    try:
        register(Sharing)
        assert "sharing_test" in declared_options()["subword_tree"]
    finally:
        SCHEMES.pop("sharing_test")


def test_every_declared_option_is_one_flag_with_its_default():
    flags = {o.name: o for o in map(click_option, scheme_option_params())
             if not o.hidden}                                  # (hidden: 0.1.0 names)
    assert list(flags) == list(declared_options())            # once each, none learned
    assert flags["rel_k"].opts == ["--rel-k"] and flags["rel_k"].default == 2
    assert flags["subword_tree"].default == "chain" and "gps_labels" not in flags


def test_the_model_config_holds_each_schemes_own_options():
    values = {"rel_k": 3, "dep_l": 1, "pascal_sigma": 2.0, "subword_tree": "inherit"}
    entries = scheme_entries(["abs", "dep", "rel"], values)
    assert entries == [
        {"name": "abs", "options": {}},
        {"name": "dep", "options": {"subword_tree": "inherit", "chain_head": "last",
                                    "dep_l": 1, "dep_terms": "key,value"}},
        {"name": "rel", "options": {"rel_k": 3, "rel_terms": "key,value"}}]


def test_learned_options_are_a_step_of_their_own_and_resume_keeps_the_saved_ones():
    from depnmt.data.batches import Example
    from depnmt.stages.parse import Sentence
    examples = [Example(0, [5, 6, 3], [7], ["a", "b"], Sentence(["a", "b"], [0, 1],
                                                                  ["root", "obj"]))]
    entries = scheme_entries(["abs", "gps"], {})
    assert entries[1]["options"]["gps_labels"] is None
    learned = learn_options(entries, examples)
    assert learned[1]["options"]["gps_labels"] == ["obj", "root"]
    assert entries[1]["options"]["gps_labels"] is None                 # returned, not written
    saved = [{"name": "gps", "options": {"gps_labels": ["x"], "gps_layers": "all"}}]
    assert with_learned(entries, saved)[1]["options"] == {
        "gps_layer": "1", "gps_dim": None, "gps_dropout": 0.0,
        "gps_labels": ["x"]}                                           # flags stay the CLI's


def test_a_flag_of_a_scheme_not_in_use_is_ignored_with_a_warning(capsys):
    from depnmt.training.config import scheme_entries_of
    entries = scheme_entries_of("abs", {"rel_k": 5}, {"rel_k"})
    assert entries == [{"name": "abs", "options": {}}]
    assert "--rel-k is ignored: it is an option of rel, deplabel_rel, which --scheme abs " \
           "does not use" in capsys.readouterr().err

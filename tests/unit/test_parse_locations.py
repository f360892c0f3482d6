"""Errors about a sentence name the user's file and line, not an index into a batch or a
list: a parser's output that makes no tree, a training tree over other words than its line."""

from __future__ import annotations

import pytest

from depnmt.core.errors import DepnmtError, InputError
from depnmt.data.batches import Example, attach_trees
from depnmt.stages.parse import Sentence, write_conllu
from depnmt.stages.parse.parser import AnalysisError, Parser
from depnmt.stages.parse.stage import parsed_trees


class CycleOn(Parser):
    """A backend whose analysis of the line ``bad`` (its words) has a cycle."""

    settings = {"backend": "spacy", "model": "fake"}

    def __init__(self, bad: list[str]):
        self.bad = bad

    def analyse(self, batch):
        n = len
        return [Sentence(words, [2, 1] + [0] * (n(words) - 2) if words == self.bad
                         else [0] + [1] * (n(words) - 1), ["dep"] * n(words)) for words in batch]


def test_a_parsers_output_that_makes_no_tree_names_the_line(tmp_path):
    text = tmp_path / "train.en"
    lines = ["a b", "c d", "e f g", "h i"]
    text.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    parser = CycleOn(["e", "f", "g"])
    trees = parsed_trees(parser, text, enumerate(lines, start=1), batch_size=2,
                         advance=lambda n: None)
    with pytest.raises(InputError) as err:
        list(trees)
    assert (err.value.path, err.value.line) == (str(text), 3)
    assert str(err.value) == (f"{text}:3: spacy fake: parser output is no tree: cycle in "
                              f"HEAD column: 1 -> 2 -> 1 (words must reach the root)")
    with pytest.raises(AnalysisError) as err:           # the batch's item, for other callers
        parser.parse([["x"], ["e", "f", "g"]])
    assert err.value.item == 1 and isinstance(err.value, DepnmtError)


def test_a_training_tree_over_other_words_names_both_files(tmp_path):
    path, text = tmp_path / "train.en.conllu", tmp_path / "train.bpe.en"
    write_conllu(path, [Sentence(["a"], [0], ["root"]), Sentence(["b", "c"], [0, 1],
                                                                 ["root", "x"])])
    examples = [Example(0, [], [], ["a"]), Example(1, [], [], ["b", "d"])]
    with pytest.raises(InputError) as err:
        attach_trees(examples, path, "src", text)
    assert (err.value.path, err.value.line) == (str(path), 4)
    assert f"but {text}:2 has ['b', 'd']" in str(err.value)

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


@pytest.mark.parametrize("line_numbers, line", [([4, 9, 12], 12), (None, 3)])
def test_a_translators_parse_that_makes_no_tree_names_the_input_line(line_numbers, line):
    """Translating with a tree scheme parses the input: a sentence whose analysis makes no
    tree is the input's file and line (``translate`` names its --input), not a batch index."""
    translator = cycle_translator(["e", "f"], "talk.txt")
    with pytest.raises(InputError) as err:
        translator.examples([["a", "b"], [], ["e", "f"]], line_numbers=line_numbers)
    assert (err.value.path, err.value.line) == ("talk.txt", line)
    assert str(err.value) == f"talk.txt:{line}: spacy fake: parser output has no root"


def cycle_translator(bad: list[str], name: str = "<input>"):
    """A Translator with only its source side: tree schemes, the :class:`CycleOn` parser."""
    from depnmt.decoding.translate import Translator
    translator = Translator.__new__(Translator)
    translator._parser, translator.needs_trees = CycleOn(bad), True
    translator.source_name, translator.task_tags = name, {}        # not a multitask model
    return translator


def test_rescore_and_contrastive_name_the_source_the_parser_makes_no_tree_of():
    """``rescore`` scores in chunks: the line is the --src file's, not the chunk's index;
    ``contrastive``'s is the item's place in its test set."""
    from depnmt.decoding.forced import ForcedScorer
    from depnmt.evaluation.contrastive import Item, score_items
    scorer = ForcedScorer.__new__(ForcedScorer)
    scorer.translator = cycle_translator(["e", "f"], "src.txt")
    with pytest.raises(InputError) as err:
        scorer.score_words([["a"], ["e", "f"]], [[1], [2]], line_numbers=[1001, 1002])
    assert str(err.value) == "src.txt:1002: spacy fake: parser output has no root"
    scorer.translator = cycle_translator(["e", "f"])
    scorer.translator.src_tokenizer = type("Split", (), {"tokenize": staticmethod(str.split)})
    scorer.target_ids = lambda line: [1]
    items = [Item("a b", "x", ["y"], "cat", "set.tsv:2"), Item("e f", "x", ["z"], "cat",
                                                                 "set.tsv:3")]
    with pytest.raises(DepnmtError) as err:
        score_items(items, scorer)
    assert str(err.value) == "set.tsv:3: spacy fake: parser output has no root"

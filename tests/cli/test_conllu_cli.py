"""Every command that reads trees goes through the one strict CoNLL-U reader, and its errors
name the user's file (or ``<stdin>``) and line: inspect, translate --input-format conllu,
analyze uas, parse --backend conllu and train's tree loading (issue 10, items 8 and 9)."""

from __future__ import annotations

import io
import sys

import pytest

from depnmt.core.errors import InputError
from depnmt.data.batches import Example, attach_trees
from depnmt.stages.parse import Sentence, write_conllu

from .conftest import run_cli

GOOD = "# text = a b\n1\ta\t_\t_\t_\t_\t2\tdep\t_\t_\n2\tb\t_\t_\t_\t_\t0\troot\t_\t_\n\n"
EMPTY_FORM = "# text = a\n1\t\t_\t_\t_\t_\t0\troot\t_\t_\n\n"       # line 2: empty FORM


def errors(capsys) -> list[str]:
    return capsys.readouterr().err.strip().splitlines()


def feed_stdin(monkeypatch, text: str) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode("utf-8"))))


def test_inspect_names_stdin_not_a_temporary_file(monkeypatch, capsys):
    """inspect used to copy stdin to a temporary file and name that file in its errors."""
    feed_stdin(monkeypatch, GOOD + EMPTY_FORM)
    assert run_cli(["inspect", "--scheme", "abs+rel"]) == 2
    assert errors(capsys) == ["error: <stdin>:6: empty FORM column (write _ for a missing value)"]


def test_inspect_reads_lone_cr_files(tmp_path, capsys):
    path = tmp_path / "cr.conllu"
    path.write_bytes(GOOD.replace("\n", "\r").encode())
    assert run_cli(["inspect", "--scheme", "abs+rel", "-i", path]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "\ta\tb"


def test_translate_conllu_errors_name_file_and_line(tiny_model, tmp_path, monkeypatch, capsys):
    """An empty FORM used to reach the model: 'error: sentence 1: ...' without FILE:LINE."""
    path = tmp_path / "in.conllu"
    path.write_text(GOOD + EMPTY_FORM, encoding="utf-8")
    assert run_cli(["translate", "-m", tiny_model, "--input-format", "conllu", "-i", path]) == 2
    assert errors(capsys) == [f"error: {path}:6: empty FORM column (write _ for a missing value)"]
    feed_stdin(monkeypatch, GOOD + GOOD.replace("\n\n", "\n"))      # cut after its last word
    assert run_cli(["translate", "-m", tiny_model, "--input-format", "conllu"]) == 2
    assert errors(capsys)[0].startswith("error: <stdin>:7: the file ends inside a sentence")


def test_analyze_uas_reads_through_the_strict_reader(tmp_path, capsys):
    gold, pred = tmp_path / "gold.conllu", tmp_path / "pred.conllu"
    gold.write_text(GOOD, encoding="utf-8")
    pred.write_bytes(GOOD.replace("\n", "\r\n").encode())
    assert run_cli(["analyze", "uas", "--gold", gold, pred]) == 0
    assert capsys.readouterr().out.splitlines()[1].split("\t")[1:4] == ["1", "2", "100.00"]
    pred.write_text(GOOD.replace("\t2\tdep", "\t02\tdep"), encoding="utf-8")
    assert run_cli(["analyze", "uas", "--gold", gold, pred]) == 2
    assert errors(capsys)[0].startswith(f"error: {pred}:2: HEAD '02' is not a number")


def test_train_tree_mismatch_names_the_block_line(tmp_path):
    """attach_trees used to name no line; it now names the first line of the tree's block."""
    path = tmp_path / "train.en.conllu"
    write_conllu(path, [Sentence(["a"], [0], ["root"]), Sentence(["b", "c"], [0, 1], ["root", "x"])])
    examples = [Example(0, [], [], ["a"]), Example(1, [], [], ["b", "d"])]
    with pytest.raises(InputError) as err:
        attach_trees(examples, path)
    assert (err.value.path, err.value.line) == (str(path), 4)
    assert examples[0].src_tree.words == ["a"]


HUGE = "9" * 5000                               # more digits than int() converts (4300)
ROW = "{}\t{}\t_\t_\t_\t_\t{}\tdep\t_\t_\n"
TOO_LARGE = GOOD + "# text = c\n" + ROW.format(1, "c", HUGE) + "\n"          # line 6
SINGLE_WORD_RANGE = GOOD + ROW.format("1-1", "c", "_") + ROW.format(1, "c", 0) + "\n"   # line 5
BAD_INPUTS = {"too-large": (TOO_LARGE, 6, f"HEAD '{HUGE[:40]}…' is too large (a number has at "
                                          f"most 9 digits)"),
              "single-word-range": (SINGLE_WORD_RANGE, 5, "multiword range 1-1 must span at "
                                                          "least two words (a-b with a < b)")}


def one_error(capsys, path, line: int, message: str) -> None:
    """stderr is exactly one ``error: FILE:LINE: message`` line (no traceback)."""
    assert errors(capsys) == [f"error: {path}:{line}: {message}"]


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_inspect_rejects_huge_numbers_and_short_ranges_in_one_line(case, tmp_path, capsys):
    text, line, message = BAD_INPUTS[case]
    path = tmp_path / "in.conllu"
    path.write_text(text, encoding="utf-8")
    assert run_cli(["inspect", "--scheme", "abs+rel", "-i", path]) == 2
    one_error(capsys, path, line, message)


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_translate_conllu_rejects_huge_numbers_and_short_ranges(case, tiny_model, tmp_path,
                                                                capsys):
    text, line, message = BAD_INPUTS[case]
    path = tmp_path / "in.conllu"
    path.write_text(text, encoding="utf-8")
    assert run_cli(["translate", "-m", tiny_model, "--input-format", "conllu", "-i", path]) == 2
    one_error(capsys, path, line, message)


@pytest.mark.parametrize("scheme", ["abs+rel", "abs+gps"])
def test_inspect_tree_that_does_not_fit_its_tokens_names_file_and_line(scheme, tmp_path,
                                                                       capsys):
    """A word ending in "@@" reads as the first piece of the next one: the error used to be
    'sentence 1: ...' (whichever --sentence was asked for), or, for 'path', none at all."""
    path = tmp_path / "in.conllu"
    path.write_text(GOOD + GOOD.replace("\ta\t", "\ta@@\t"), encoding="utf-8")
    assert run_cli(["inspect", "--scheme", scheme, "-i", path]) == 2
    one_error(capsys, path, 5, "1 words in the subwords but 2 in the tree")
    assert run_cli(["inspect", "--scheme", scheme, "--sentence", "2", "-i", path]) == 2
    one_error(capsys, path, 5, "1 words in the subwords but 2 in the tree")


def test_scheme_errors_name_the_trees_file_and_line(tmp_path):
    """What train, translate and analyze report when a scheme finds that a tree does not fit
    its sentence's subwords (a truncated input's tree keeps its origin too)."""
    from types import SimpleNamespace

    from depnmt.core.trees import project_tree, truncate_tree
    from depnmt.model.schemes.base import sentence_errors
    from depnmt.stages.parse import read_conllu
    path = tmp_path / "in.conllu"
    path.write_text(GOOD + GOOD, encoding="utf-8")
    tree = truncate_tree(list(read_conllu(path))[1], 2)
    with pytest.raises(InputError) as err, \
            sentence_errors(SimpleNamespace(index=1, src_tree=tree)):
        project_tree(tree.heads, ["a@@", "b"])
    assert str(err.value) == f"{path}:5: 1 words in the subwords but 2 in the tree"
    assert truncate_tree(tree, 1).origin == (str(path), 5)


@pytest.mark.parametrize("case", ["too-large", "single-word-range"])
def test_train_rejects_huge_numbers_and_short_ranges(case, tiny_bpe, tmp_path_factory, tmp_path,
                                                     capsys):
    """The training trees (``--trees``) go through the same reader: one FILE:LINE error."""
    from .conftest import TINY_MODEL, import_random_trees
    trees = import_random_trees(tiny_bpe, tmp_path_factory.mktemp("given-bad"), f"parse-{case}",
                                ("en",), ["dep"], seed=3)
    path = trees / "train.en.conllu"
    lines = path.read_text(encoding="utf-8").split("\n")
    cols = lines[1].split("\t")                      # line 2: the first word of the first tree
    if case == "too-large":
        cols[6] = HUGE
        message = f"HEAD '{HUGE[:40]}…' is too large (a number has at most 9 digits)"
    else:
        lines.insert(1, ROW.format("1-1", cols[1], "_").rstrip("\n"))
        message = "multiword range 1-1 must span at least two words (a-b with a < b)"
    lines[1 + (case != "too-large")] = "\t".join(cols)
    path.write_text("\n".join(lines), encoding="utf-8")
    capsys.readouterr()
    assert run_cli(["train", "-i", tiny_bpe, "--trees", trees, "-o", tmp_path / "m",
                    *TINY_MODEL, "--max-steps", "1", "--scheme", "abs+treedist"]) == 2
    one_error(capsys, path, 2, message)

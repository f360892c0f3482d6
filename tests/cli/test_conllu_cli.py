"""Every command that reads trees goes through the one strict CoNLL-U reader, and its errors
name the user's file (or ``<stdin>``) and line: inspect, translate --input-format conllu,
analyze uas, parse --backend conllu and train's tree loading (issue 10, items 8 and 9)."""

from __future__ import annotations

import io
import sys

import pytest

from depnmt.data import Example, attach_trees
from depnmt.errors import InputError
from depnmt.parse import Sentence, write_conllu

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
    assert run_cli(["inspect", "--scheme", "rel"]) == 2
    assert errors(capsys) == ["error: <stdin>:6: empty FORM column (write _ for a missing value)"]


def test_inspect_reads_lone_cr_files(tmp_path, capsys):
    path = tmp_path / "cr.conllu"
    path.write_bytes(GOOD.replace("\n", "\r").encode())
    assert run_cli(["inspect", "--scheme", "rel", "-i", path]) == 0
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

"""`depnmt inspect --png`: the picture of Omote et al.'s Table 1 sentence ("My father bought a
red car .") holds exactly the printed matrix, its tree's arcs and labels; files per sentence."""

from __future__ import annotations

import math

import pytest
from click.testing import CliRunner
from test_inspect import CONLLU, JA_TABLE_1, OMOTE_TABLE_1

from depnmt.cli import cli
from depnmt.evaluation.inspect import pair_cells
from depnmt.evaluation.treefigure import cell_values, figure_cells, png_paths, sentence_figure
from depnmt.stages.parse import Sentence

PNG = b"\x89PNG\r\n\x1a\n"
WORDS = "My father bought a red car .".split()
TREE = Sentence(WORDS, [2, 3, 0, 6, 6, 3, 3],
                ["nmod:poss", "nsubj", "root", "det", "amod", "obj", "punct"])


def table(text: str) -> list[list[str]]:
    return [line.split()[1:] for line in text.splitlines()]


def invoke(*args: str, stdin: str = CONLLU):
    return CliRunner().invoke(cli, ["inspect", *args], input=stdin)


@pytest.mark.parametrize("scheme, printed", [("dep", OMOTE_TABLE_1), ("deplabel", JA_TABLE_1)])
def test_the_heatmap_holds_the_printed_matrix(scheme, printed):
    cells = pair_cells(scheme, TREE.heads, WORDS)
    assert cells == table(printed)
    fig = sentence_figure(scheme, TREE, WORDS, cells)
    heatmap = fig.axes[1]
    assert figure_cells(fig) == table(printed)                     # the text in every cell
    image = heatmap.get_images()[0].get_array()                    # the colours' numbers
    for i, row in enumerate(cell_values(cells)):
        for j, value in enumerate(row):
            if math.isnan(value):
                assert image.mask[i, j] and cells[i][j] in ("self", "sib", "non_dep")
            else:
                assert image[i, j] == value == int(cells[i][j])
    ticks = [[t.get_text() for t in labels()] for labels in (heatmap.get_xticklabels,
                                                              heatmap.get_yticklabels)]
    assert ticks == [WORDS, WORDS]


def test_the_arcs_carry_every_relation_over_the_words():
    fig = sentence_figure("dep", TREE, WORDS, pair_cells("dep", TREE.heads, WORDS))
    arcs = fig.axes[0]
    texts = [t.get_text() for t in arcs.texts if t.get_text()]       # not the root arrow
    assert sorted(t for t in texts if t not in WORDS) == sorted(TREE.deprels)
    assert [t for t in texts if t in WORDS] == WORDS
    assert len(arcs.patches) == 6                                  # one arc per non-root word
    spans = sorted((round(p.center[0] - p.width / 2), round(p.center[0] + p.width / 2))
                   for p in arcs.patches)
    assert spans == [(0, 1), (1, 2), (2, 5), (2, 6), (3, 5), (4, 5)]   # head ↔ dependent


def test_subwords_keep_word_arcs_over_a_subword_matrix():
    tokens = "My fa@@ ther bought a red car .".split()
    cells = pair_cells("dep", TREE.heads, tokens)
    fig = sentence_figure("dep", TREE, tokens, cells)
    assert figure_cells(fig) == cells and len(cells) == 8
    father = next(t for t in fig.axes[0].texts if t.get_text() == "father")
    assert father.get_position()[0] == 1.5                        # centred over fa@@ ther


def test_inspect_png_writes_one_picture_per_sentence(tmp_path):
    result = invoke("--scheme", "dep", "--png", str(tmp_path / "car.png"))
    assert result.exit_code == 0, result.output
    assert (tmp_path / "car.png").read_bytes()[:8] == PNG
    assert (tmp_path / "car.png").stat().st_size > 20_000
    result = invoke("--scheme", "deplabel", "--png", str(tmp_path / "two.png"),
                    stdin=CONLLU + CONLLU)
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.glob("two*")) == ["two-1.png", "two-2.png"]
    result = invoke("--scheme", "path", "--sentence", "2", "--png", str(tmp_path / "path.png"),
                    stdin=CONLLU + CONLLU)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "path.png").read_bytes()[:8] == PNG
    assert result.stdout.startswith("My\troot>nsubj>nmod:poss\n")  # only sentence 2 printed
    assert result.stdout.count("\n") == 7


def test_an_empty_sentence_gets_no_picture_and_a_warning(tmp_path):
    result = invoke("--scheme", "dep", "--png", str(tmp_path / "t.png"),
                    stdin="# text =\n\n" + CONLLU)
    assert result.exit_code == 0, result.output
    assert f"warning: sentence 1 is empty: no {tmp_path / 't-1.png'}" in result.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["t-2.png"]


def test_sentence_out_of_range_is_an_error(tmp_path):
    result = invoke("--scheme", "dep", "--sentence", "3", "--png", str(tmp_path / "x.png"))
    assert result.exit_code != 0 and "--sentence 3: the input has 1 tree(s)" in str(
        result.exception or result.output)
    assert not list(tmp_path.iterdir())


def test_png_paths():
    from pathlib import Path
    assert png_paths(Path("d/t.png"), 1) == [Path("d/t.png")]
    assert png_paths(Path("d/t.png"), 2) == [Path("d/t-1.png"), Path("d/t-2.png")]

"""``depnmt inspect`` reproduces Omote et al. 2019 Table 1 and the Japanese paper's Table 1 from
a CoNLL-U of "My father bought a red car ."; the scheme features agree with what it prints."""

from __future__ import annotations

import torch
from click.testing import CliRunner

from depnmt.cli import cli
from depnmt.data.batches import Example, add_features
from depnmt.model.schemes.registry import build_schemes, scheme_entries
from depnmt.stages.parse import Sentence

CONLLU = """\
# text = My father bought a red car .
1\tMy\t_\tPRON\t_\t_\t2\tnmod:poss\t_\t_
2\tfather\t_\tNOUN\t_\t_\t3\tnsubj\t_\t_
3\tbought\t_\tVERB\t_\t_\t0\troot\t_\t_
4\ta\t_\tDET\t_\t_\t6\tdet\t_\t_
5\tred\t_\tADJ\t_\t_\t6\tamod\t_\t_
6\tcar\t_\tNOUN\t_\t_\t3\tobj\t_\t_
7\t.\t_\tPUNCT\t_\t_\t3\tpunct\t_\t_

"""
HEADER = "\tMy\tfather\tbought\ta\tred\tcar\t."

# Omote et al. 2019, Table 1: dist_ij = depth(n_j) − depth(n_i).
OMOTE_TABLE_1 = """\
My 0 -1 -2 0 0 -1 -1
father 1 0 -1 1 1 0 0
bought 2 1 0 2 2 1 1
a 0 -1 -2 0 0 -1 -1
red 0 -1 -2 0 0 -1 -1
car 1 0 -1 1 1 0 0
. 1 0 -1 1 1 0 0"""

# The Japanese paper, Table 1 (表 1): relative position labels on the dependency tree.
JA_TABLE_1 = """\
My self -1 -2 non_dep non_dep non_dep non_dep
father 1 self -1 non_dep non_dep sib sib
bought 2 1 self 2 2 1 1
a non_dep non_dep -2 self sib -1 non_dep
red non_dep non_dep -2 sib self -1 non_dep
car non_dep sib -1 1 1 self sib
. non_dep sib -1 non_dep non_dep sib self"""


def inspect(*args: str, stdin: str = CONLLU) -> str:
    result = CliRunner().invoke(cli, ["inspect", *args], input=stdin)
    assert result.exit_code == 0, result.output
    return result.output


def as_tsv(table: str) -> str:
    return HEADER + "\n" + "\n".join(l.replace(" ", "\t") for l in table.splitlines()) + "\n"


def test_dep_prints_omote_table_1():
    assert inspect("--scheme", "abs+dep") == as_tsv(OMOTE_TABLE_1)


def test_deplabel_prints_the_japanese_papers_table_1():
    assert inspect("--scheme", "abs+deplabel") == as_tsv(JA_TABLE_1)


def test_rel_prints_j_minus_i_and_clip_applies():
    rows = inspect("--scheme", "abs+rel", "--clip", "2").splitlines()
    assert rows[1].split("\t") == ["My", "0", "1", "2", "2", "2", "2", "2"]
    assert rows[7].split("\t")[1] == "-2"


def test_clip_on_tree_schemes():
    dep = inspect("--scheme", "abs+dep", "--clip", "1").splitlines()
    assert dep[1].split("\t")[3] == "-1"                           # My -> bought: -2 clipped
    deplabel = inspect("--scheme", "abs+deplabel", "--clip", "1").splitlines()
    assert deplabel[1].split("\t")[3] == "non_dep"                 # beyond k: the zero vector


def test_sentences_are_separated_by_a_blank_line():
    out = inspect("--scheme", "abs+dep", stdin=CONLLU + CONLLU)
    assert out == as_tsv(OMOTE_TABLE_1) + "\n" + as_tsv(OMOTE_TABLE_1)


def test_bpe_codes_show_the_projected_matrix(tmp_path):
    codes = tmp_path / "codes"
    codes.write_text("#version: 0.2\nb o\nbo u\ng h\ngh t</w>\nf a\nfa t\nfat h\nfath e\n"
                     "fathe r</w>\nM y</w>\nc a\nca r</w>\nr e\nre d</w>\n")
    chain = inspect("--scheme", "abs+dep", "--bpe-codes", str(codes)).splitlines()
    assert chain[0] == "\tMy\tfather\tbou@@\tght\ta\tred\tcar\t."
    assert chain[1].split("\t") == ["My", "0", "-1", "-1", "-2", "0", "0", "-1", "-1"]
    inherit = inspect("--scheme", "abs+deplabel", "--bpe-codes", str(codes),
                      "--subword-tree", "inherit").splitlines()
    assert inherit[3].split("\t")[3:5] == ["self", "self"]         # bou@@ with bou@@, ght


def test_scheme_features_match_the_printed_tables():
    """The label matrices train uses, mapped back to values, are the tables above (k = l = 3,
    so that nothing is clipped): EOS is 0 ("no term") on its row and column."""
    words = "My father bought a red car .".split()
    tree = Sentence(words, [2, 3, 0, 6, 6, 3, 3], ["_"] * 7)
    ex = Example(0, list(range(4, 11)) + [3], [], words, tree)
    add_features([ex], build_schemes(scheme_entries(["dep", "deplabel"],
                                                {"dep_l": 3, "deplabel_k": 3})))
    dep = ex.feats["dep_labels"].long()
    expected = torch.tensor([[int(v) for v in l.split()[1:]] for l in OMOTE_TABLE_1.splitlines()])
    assert torch.equal(dep[:7, :7] - 4, expected)
    names = {"self": 4, "sib": 8, "non_dep": 0}
    ja = torch.tensor([[names[v] if v in names else int(v) + 4 for v in l.split()[1:]]
                       for l in JA_TABLE_1.splitlines()])
    assert torch.equal(ex.feats["deplabel_labels"].long()[:7, :7], ja)
    assert not dep[7].any() and not dep[:, 7].any()


# Wang et al. 2019's relative structural positions on the same tree, worked out by hand from
# the definition (depnmt/model/schemes/structural.py): depths bought 0, father 1, car 1, . 1,
# My 2, a 2, red 2; on one root path abs(x_i) − abs(x_j), otherwise abs(x_i) + abs(x_j), with
# + for i > j and − for i < j.
STRUCTURAL = """\
My 0 1 2 -4 -4 -3 -3
father -1 0 1 -3 -3 -2 -2
bought -2 -1 0 -2 -2 -1 -1
a 4 3 2 0 -4 1 -3
red 4 3 2 4 0 1 -3
car 3 2 1 -1 -1 0 -2
. 3 2 1 3 3 2 0"""


def test_structural_prints_the_relative_structural_positions_and_clips_them():
    assert inspect("--scheme", "abs+structural") == as_tsv(STRUCTURAL)
    clipped = inspect("--scheme", "abs+structural", "--clip", "2").splitlines()
    assert clipped[1].split("\t") == ["My", "0", "1", "2", "-2", "-2", "-2", "-2"]


def test_pascal_prints_the_gaussian_around_each_parent_and_refuses_clip():
    """N(j | p_i, 1) = exp(−(j − p_i)² / 2) / √(2π), p_i the parent's position (bought, the
    root, is its own parent): 0.40 on the parent, 0.24 one away, 0.05 two away."""
    rows = [line.split("\t") for line in inspect("--scheme", "abs+pascal").splitlines()]
    assert rows[1] == ["My", "0.24", "0.40", "0.24", "0.05", "0.00", "0.00", "0.00"]
    assert rows[3] == ["bought", "0.05", "0.24", "0.40", "0.24", "0.05", "0.00", "0.00"]
    assert rows[4][5:] == ["0.24", "0.40", "0.24"]                       # a -> car
    for scheme in ("abs+pascal", "abs+gps"):
        result = CliRunner().invoke(cli, ["inspect", "--scheme", scheme, "--clip", "2"],
                                    input=CONLLU)
        assert result.exit_code == 2 and "--clip does not apply" in result.output

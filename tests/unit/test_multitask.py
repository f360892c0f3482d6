"""Linearized dependency trees for the multi-task data (Currey & Heafield 2019's auxiliary task,
on dependency trees): worked examples by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from depnmt.core.trees import random_heads
from depnmt.stages.multitask import linearize


def test_worked_example():
    """"The dog barks ." — The→dog (det), dog→barks (nsubj), barks the root, .→barks (punct):
    each subtree is "(LABEL", its left dependents, the word, its right dependents, ")"."""
    words, heads = "The dog barks .".split(), [2, 3, 0, 3]
    deprels = ["det", "nsubj", "root", "punct"]
    assert " ".join(linearize(words, heads, deprels)) == \
        "(root (nsubj (det The ) dog ) barks (punct . ) )"


def test_right_branching_and_several_dependents_in_sentence_order():
    # "saw a man with a telescope": saw root; man→saw (obj); a→man; telescope→man (nmod);
    # with→telescope (case); a→telescope
    words = "I saw a man with a telescope".split()
    heads = [2, 0, 4, 2, 7, 7, 4]
    deprels = ["nsubj", "root", "det", "obj", "case", "det", "nmod"]
    assert " ".join(linearize(words, heads, deprels)) == (
        "(root (nsubj I ) saw (obj (det a ) man (nmod (case with ) (det a ) telescope ) ) )")


def test_non_projective_tree_keeps_every_word_once():
    # "A hearing is scheduled on the issue today": "on the issue" hangs on "hearing" across
    # "is scheduled" — the linearization follows the tree, so the words leave sentence order
    words = "A hearing is scheduled on the issue today".split()
    heads = [2, 4, 4, 0, 7, 7, 2, 4]
    deprels = ["det", "nsubj", "aux", "root", "case", "det", "nmod", "obl"]
    out = linearize(words, heads, deprels)
    assert [t for t in out if t != ")" and not t.startswith("(")] == \
        "A hearing on the issue is scheduled today".split()
    assert out.count(")") == len(words) == sum(t.startswith("(") for t in out)


def unlinearize(tokens: list[str]) -> list[int]:
    """The CoNLL-U heads the brackets encode (word ``wK`` is word K + 1)."""
    stack: list[dict] = []
    heads: dict[int, int] = {}
    for tok in tokens:
        if tok.startswith("("):
            stack.append({"word": None, "children": []})
        elif tok == ")":
            node = stack.pop()
            for child in node["children"]:
                heads[child] = node["word"] + 1
            if stack:
                stack[-1]["children"].append(node["word"])
            else:
                heads[node["word"]] = 0
        else:
            stack[-1]["word"] = int(tok[1:])
    return [heads[i] for i in range(len(heads))]


def test_random_trees_round_trip():
    import random
    rng = random.Random(3)
    for n in (1, 2, 5, 30, 200):
        heads = random_heads(n, rng)
        words = [f"w{i}" for i in range(n)]
        assert unlinearize(linearize(words, heads, ["dep"] * n)) == heads


def test_a_forest_or_a_cycle_is_refused():
    with pytest.raises(ValueError, match="2 roots"):
        linearize(["a", "b"], [0, 0], ["root", "root"])
    with pytest.raises(ValueError, match="cycle"):
        linearize(["a", "b", "c"], [0, 3, 2], ["root", "dep", "dep"])
    assert linearize([], [], []) == []


def test_tree_file_must_have_one_tree_per_line(tmp_path):
    from depnmt.core.errors import InputError
    from depnmt.stages.multitask import _trees
    from depnmt.stages.parse import Sentence, write_conllu
    trees = [Sentence(["a", "b"], [0, 1], ["root", "dep"]), Sentence(["c"], [0], ["root"])]
    write_conllu(tmp_path / "train.en.conllu", trees)

    def text(*lines: str) -> Path:
        (tmp_path / "train.en").write_text("".join(f"{line}\n" for line in lines))
        return tmp_path / "train.en"
    assert list(_trees(tmp_path, "train", "en", text("a b", "c"))) == [
        ("a b", ["(root", "a", "(dep", "b", ")", ")"]), ("c", ["(root", "c", ")"])]
    with pytest.raises(InputError, match="more trees than the text's 1 lines"):
        list(_trees(tmp_path, "train", "en", text("a b")))
    with pytest.raises(InputError, match="has 2 trees but the text has more lines"):
        list(_trees(tmp_path, "train", "en", text("a b", "c", "d")))
    with pytest.raises(InputError, match=r"tree 2 has words \['c'\]… but \S*train\.en:2 has"):
        list(_trees(tmp_path, "train", "en", text("a b", "x")))

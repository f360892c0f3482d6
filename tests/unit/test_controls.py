"""Control trees (depnmt/stages/parse/controls.py): uniform samplers checked against enumeration,
every kind's definition, labels, seeds; and every kind on every UD treebank of ../shared."""

from __future__ import annotations

import itertools
import random
from collections import Counter

import pytest

from depnmt.core.conllu import tree_problem
from depnmt.core.errors import DepnmtError
from depnmt.stages.parse import Sentence, make_parser, read_conllu, write_conllu
from depnmt.stages.parse.controls import (KINDS, Control, branching_heads, control_labels,
                                          count_projective_trees, is_projective, noisy_heads,
                                          permuted_heads, random_nonprojective_heads,
                                          random_projective_heads, sentence_rng, shuffled_heads,
                                          subtree)

# chi-square critical values at the 0.999 quantile (scipy.stats.chi2.ppf(0.999, df))
CHI2_999 = {6: 22.458, 29: 58.301, 63: 103.442}


def all_trees(n: int) -> list[tuple[int, ...]]:
    """Every single-root tree over ``n`` words, by brute force over all head arrays."""
    return [h for h in itertools.product(range(n + 1), repeat=n) if tree_problem(list(h)) is None]


def chi_square(counts: Counter, support: list, draws: int) -> float:
    expected = draws / len(support)
    return sum((counts.get(tree, 0) - expected) ** 2 / expected for tree in support)


# ---------------------------------------------------------------------------------------------
# The uniform samplers

@pytest.mark.parametrize("n", range(1, 7))
def test_counts_of_projective_and_all_trees_match_enumeration(n):
    trees = all_trees(n)
    assert len(trees) == n ** (n - 1)
    assert sum(is_projective(t) for t in trees) == count_projective_trees(n)
    assert [count_projective_trees(k) for k in range(1, 6)] == [1, 2, 7, 30, 143]


def test_is_projective_on_known_trees():
    assert is_projective([2, 0, 2]) and is_projective([0, 1, 2, 3])
    assert not is_projective([3, 0, 2, 2])           # 1 <- 3 covers 2, 3's head (crossing)
    assert not is_projective([0, 4, 1, 1])           # 1 -> 4 covers 2, whose head is 4


@pytest.mark.parametrize("n, draws", [(3, 7000), (4, 30000)])
def test_random_projective_trees_are_uniform(n, draws):
    rng = random.Random(12)
    counts = Counter(tuple(random_projective_heads(n, rng)) for _ in range(draws))
    support = [t for t in all_trees(n) if is_projective(t)]
    assert set(counts) == set(support)                 # every projective tree, nothing else
    assert chi_square(counts, support, draws) < CHI2_999[len(support) - 1]


def test_random_nonprojective_trees_are_uniform_over_all_trees():
    n, draws = 4, 64000
    rng = random.Random(13)
    counts = Counter(tuple(random_nonprojective_heads(n, rng)) for _ in range(draws))
    support = all_trees(n)
    assert set(counts) == set(support)
    assert chi_square(counts, support, draws) < CHI2_999[63]


@pytest.mark.parametrize("n", [0, 1, 2, 5, 40, 150])
def test_samplers_give_trees_of_every_length(n):
    rng = random.Random(n)
    for _ in range(20):
        heads = random_projective_heads(n, rng)
        assert len(heads) == n and tree_problem(heads) is None and is_projective(heads)
        heads = random_nonprojective_heads(n, rng)
        assert len(heads) == n and tree_problem(heads) is None


def test_long_random_trees_are_mostly_nonprojective():
    rng = random.Random(3)
    assert sum(not is_projective(random_nonprojective_heads(20, rng)) for _ in range(50)) > 45


# ---------------------------------------------------------------------------------------------
# The kinds that read the parser's tree, chains, labels

def shape(heads) -> list:
    """The tree's unlabelled shape: the sorted (depth, number of dependents) of its nodes."""
    kids = Counter(h for h in heads if h)
    depth = []
    for i in range(len(heads)):
        d, node = 0, i + 1
        while heads[node - 1]:
            node, d = heads[node - 1], d + 1
        depth.append(d)
    return sorted((depth[i], kids.get(i + 1, 0)) for i in range(len(heads)))


def test_permuted_heads_moves_words_and_keeps_the_shape():
    heads = [2, 0, 2, 3]                             # 1 <- 2 -> 3 -> 4
    assert permuted_heads(heads, [0, 1, 2, 3]) == heads
    assert permuted_heads(heads, [3, 2, 1, 0]) == [2, 3, 0, 3]
    rng = random.Random(5)
    for _ in range(200):
        n = rng.randrange(1, 25)
        tree = random_nonprojective_heads(n, rng)
        out = shuffled_heads(tree, rng)
        assert tree_problem(out) is None and shape(out) == shape(tree)


def test_chains():
    assert branching_heads(4, "left") == [2, 3, 4, 0]
    assert branching_heads(4, "right") == [0, 1, 2, 3]
    assert branching_heads(1, "left") == branching_heads(1, "right") == [0]
    assert branching_heads(0, "left") == []


@pytest.mark.parametrize("p", [0.1, 0.5, 1.0])
def test_noise_corrupts_a_fraction_p_of_the_heads_and_stays_a_tree(p):
    rng = random.Random(7)
    changed = total = 0
    for _ in range(400):
        n = rng.randrange(3, 30)
        tree = random_projective_heads(n, rng)
        out = noisy_heads(tree, p, rng)
        assert tree_problem(out) is None
        assert out.index(0) == tree.index(0)          # the root word stays the root
        diff = sum(a != b for a, b in zip(tree, out))
        assert diff <= int(p * (n - 1)) + 1
        changed, total = changed + diff, total + n - 1
    assert abs(changed / total - p) < 0.05


def test_noise_never_makes_a_cycle_when_the_only_head_is_taken():
    # the root's only dependent heading every other word has no other head: it keeps its own
    for seed in range(10):
        assert noisy_heads([0, 1], 1.0, random.Random(seed)) == [0, 1]
        assert noisy_heads([0, 1, 2], 0.5, random.Random(seed)) in ([0, 1, 2], [0, 1, 1])
    assert subtree([0, 1, 2], 1) == {1, 2} and subtree([0, 1, 1], 0) == {0, 1, 2}


def test_labels():
    rng = random.Random(0)
    deprels = ["det", "nsubj", "root", "punct"]
    heads = [2, 3, 0, 3]
    assert control_labels(deprels, heads, heads, "keep", rng) == deprels
    assert control_labels(deprels, heads, heads, "constant", rng) == ["dep", "dep", "root", "dep"]
    shuffled = [tuple(control_labels(deprels, heads, heads, "shuffle", rng)) for _ in range(50)]
    assert all(sorted(s) == sorted(deprels) and s[2] == "root" for s in shuffled)
    assert len(set(shuffled)) == 6                    # every order of the three other labels


def test_the_root_label_moves_with_the_root():
    """The new root gets ``root``; the parser's root word, now a dependent, gets ``dep``
    (keep); shuffle deals the parser's other labels to the other words."""
    rng = random.Random(0)
    deprels, parser_heads, heads = ["det", "nsubj", "root", "punct"], [2, 3, 0, 3], [0, 1, 2, 3]
    assert control_labels(deprels, parser_heads, heads, "keep", rng) == \
        ["root", "nsubj", "dep", "punct"]
    assert control_labels(deprels, parser_heads, heads, "constant", rng) == \
        ["root", "dep", "dep", "dep"]
    shuffled = {tuple(control_labels(deprels, parser_heads, heads, "shuffle", rng))
                for _ in range(60)}
    assert {s[0] for s in shuffled} == {"root"} and len(shuffled) == 6
    assert all(sorted(s[1:]) == ["det", "nsubj", "punct"] for s in shuffled)
    # labels that are no UD tree's (two roots, a root subtype): still one root, on the root
    odd = ["root", "root:x", "obj", "root"]
    for mode in ("keep", "shuffle", "constant"):
        out = control_labels(odd, [0, 1, 1, 1], [2, 0, 2, 2], mode, rng)
        assert out[1] == "root" and "root" not in out[:1] + out[2:]
        assert not any(label.startswith("root:") for label in out)
    assert control_labels([], [], [], "shuffle", rng) == []


def synthetic_sentences(count: int, seed: int) -> list[Sentence]:
    """Parser-like trees (UD labels, ``root`` on the root) over 0 to 30 made-up words."""
    rng = random.Random(seed)
    labels = ["nsubj", "obj", "det", "amod", "case", "punct", "conj"]
    out = []
    for i in range(count):
        n = i % 31
        heads = random_nonprojective_heads(n, rng)
        out.append(Sentence([f"w{i}.{k}" for k in range(n)], heads,
                            ["root" if h == 0 else rng.choice(labels) for h in heads],
                            ["X"] * n if n else None))
    return out


def check_one_root_label(trees: list[Sentence], path) -> None:
    """Every tree has exactly one ``root`` DEPREL, on its HEAD-0 word, and the CoNLL-U reader
    reads back what was written."""
    for tree in trees:
        roots = [i for i, label in enumerate(tree.deprels) if label.split(":")[0] == "root"]
        assert roots == [i for i, h in enumerate(tree.heads) if h == 0], tree
    write_conllu(path, trees)
    assert list(read_conllu(path)) == trees


@pytest.mark.parametrize("labels", ["keep", "shuffle", "constant"])
@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_and_label_mode_gives_one_root_label(kind, labels, tmp_path):
    control = Control(kind, 1, labels, 0.3 if kind == "noise" else None)
    gold = synthetic_sentences(300, 11)
    check_one_root_label([control.apply(tree) for tree in gold], tmp_path / "c.conllu")


@pytest.mark.parametrize("labels", ["keep", "shuffle", "constant"])
@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_and_label_mode_gives_one_root_label_on_ud_english(kind, labels, shared_data,
                                                                       tmp_path):
    control = Control(kind, 1, labels, 0.3 if kind == "noise" else None)
    gold = list(read_conllu(shared_data / "ud" / "en_ewt-ud-dev.conllu"))
    trees = [control.apply(tree) for tree in gold]
    check_one_root_label(trees, tmp_path / "c.conllu")
    if labels == "shuffle":                           # a UD tree keeps its labels
        assert all(sorted(t.deprels) == sorted(g.deprels) for t, g in zip(trees, gold))


# ---------------------------------------------------------------------------------------------
# Control: settings, seeds

def test_control_settings_are_checked_and_round_trip():
    control = Control("noise", 3, "shuffle", 0.2)
    assert Control.from_dict(control.to_dict()) == control
    for bad in ({"kind": "randomly"}, {"kind": "noise"}, {"kind": "noise", "noise": 1.5},
                {"kind": "shuffled", "noise": 0.2}, {"kind": "shuffled", "labels": "drop"},
                {"kind": "shuffled", "seed": "1"}):
        with pytest.raises(DepnmtError):
            Control(**bad)
    with pytest.raises(DepnmtError, match="not a tree control"):
        Control.from_dict({"kind": "shuffled"})


def test_a_control_recorded_before_the_one_root_rule_keeps_its_labels():
    """A record without ``label_rule`` (a model trained on such trees) is ``legacy``: the same
    heads, the labels as they were made then (``keep``: the parser's, root and all); a control
    made today records ``ud``."""
    record = {"kind": "random-projective", "seed": 1, "labels": "keep", "noise": None}
    legacy = Control.from_dict(record)
    assert legacy.label_rule == "legacy" and "before the one-root rule" in legacy.describe()
    assert Control(**record).to_dict() == {**record, "label_rule": "ud"}
    assert Control.from_dict(legacy.to_dict()) == legacy
    old, new = legacy.apply(SENTENCE), Control(**record).apply(SENTENCE)
    assert old.heads == new.heads and old.deprels == SENTENCE.deprels
    assert new.deprels != old.deprels and new.deprels.count("root") == 1
    shuffled = Control.from_dict({**record, "labels": "shuffle"}).apply(SENTENCE)
    assert sorted(shuffled.deprels) == sorted(SENTENCE.deprels)
    with pytest.raises(DepnmtError, match="label_rule"):
        Control.from_dict({**record, "label_rule": "other"})


SENTENCE = Sentence("the old man saw a small dog in the park".split(),
                    [3, 3, 4, 0, 7, 7, 4, 10, 10, 7],
                    ["det", "amod", "nsubj", "root", "det", "amod", "obj", "case", "det", "nmod"],
                    ["DET", "ADJ", "NOUN", "VERB", "DET", "ADJ", "NOUN", "ADP", "DET", "NOUN"],
                    [0] * 10)


@pytest.mark.parametrize("kind", KINDS)
def test_a_control_tree_is_a_function_of_seed_and_words(kind):
    noise = 0.5 if kind == "noise" else None
    control = Control(kind, 1, "shuffle", noise)
    tree = control.apply(SENTENCE)
    assert tree.words == SENTENCE.words and tree.upos == SENTENCE.upos and tree.sent_ids is None
    assert tree_problem(tree.heads) is None
    assert control.apply(SENTENCE) == tree
    assert sentence_rng(control, SENTENCE.words).random() == \
        sentence_rng(control, list(SENTENCE.words)).random()
    if kind not in ("left-branching", "right-branching"):
        others = {tuple(Control(kind, seed, "keep", noise).apply(SENTENCE).heads)
                  for seed in range(2, 12)}
        assert len(others) > 3                         # another seed, other trees


def test_make_parser_applies_a_recorded_control(monkeypatch):
    from depnmt.stages.parse import ControlledParser, Parser

    class Fixed(Parser):
        settings = {"backend": "spacy", "lang": "en", "model": None, "retokenize": False}

        def parse(self, batch):
            return [SENTENCE for _ in batch]

    import depnmt.stages.parse.spacy_backend as spacy_backend
    monkeypatch.setattr(spacy_backend, "SpacyParser", lambda **kwargs: Fixed())
    control = Control("random-projective", 4, "constant")
    parser = make_parser({**Fixed.settings, "control": control.to_dict()})
    assert isinstance(parser, ControlledParser)
    assert parser.settings == {**Fixed.settings, "control": control.to_dict()}
    assert parser.parse([SENTENCE.words]) == [control.apply(SENTENCE)]
    assert "random-projective" in parser.describe()
    assert not isinstance(make_parser({**Fixed.settings, "control": None}), ControlledParser)
    with pytest.raises(DepnmtError, match="cannot parse new text"):
        make_parser({"backend": "conllu", "control": control.to_dict()})


# ---------------------------------------------------------------------------------------------
# Every kind on every UD treebank: valid for the reader, as specified, the same for a seed

UD_CONTROLS = [Control("random-projective", 1, "keep"),
               Control("random-nonprojective", 1, "shuffle"), Control("shuffled", 1, "constant"),
               Control("left-branching", 1, "keep"), Control("right-branching", 1, "constant"),
               Control("noise", 1, "keep", 0.2)]


def check_as_specified(control: Control, gold: Sentence, tree: Sentence) -> bool:
    """Assert what ``control`` promises about ``tree`` (from ``gold``); True when the heads
    differ from the gold ones."""
    n = len(gold)
    if control.kind == "random-projective":
        assert is_projective(tree.heads)
    elif control.kind == "shuffled":
        assert shape(tree.heads) == shape(gold.heads)
    elif control.kind == "left-branching":
        assert tree.heads == list(range(2, n + 1)) + [0]
    elif control.kind == "right-branching":
        assert tree.heads == list(range(n))
    elif control.kind == "noise":
        assert tree.heads.index(0) == gold.heads.index(0)
        assert sum(a != b for a, b in zip(tree.heads, gold.heads)) <= int(0.2 * (n - 1)) + 1
    root = tree.heads.index(0) if n else None
    if control.labels == "keep":
        assert tree.deprels == ["root" if i == root else "dep" if label == "root" else label
                                for i, label in enumerate(gold.deprels)]
    elif control.labels == "shuffle":
        assert sorted(tree.deprels) == sorted(gold.deprels)
    else:
        assert tree.deprels == ["root" if h == 0 else "dep" for h in tree.heads]
    return tree.heads != gold.heads


@pytest.fixture(scope="module")
def ud_trees(shared_data):
    files = sorted((shared_data / "ud").glob("*.conllu"))
    assert len(files) >= 6
    return {path.name: list(read_conllu(path)) for path in files}


@pytest.mark.parametrize("control", UD_CONTROLS, ids=lambda c: c.kind)
def test_control_trees_of_all_ud_data(control, ud_trees, tmp_path):
    for name, gold in ud_trees.items():
        trees = [control.apply(tree) for tree in gold]
        path = tmp_path / name
        write_conllu(path, trees)
        back = list(read_conllu(path))                  # the reader's rules: one root, no cycle
        assert back == trees
        long = [check_as_specified(control, g, t) for g, t in zip(gold, trees) if len(g) >= 5]
        if control.kind == "noise":                     # about 0.2 of the heads changed
            changed = sum(a != b for g, t in zip(gold, trees) for a, b in zip(g.heads, t.heads))
            words = sum(len(g) - 1 for g in gold)
            assert 0.17 < changed / words < 0.21, (name, changed / words)
        else:
            assert sum(long) > 0.9 * len(long), name    # (almost) every tree differs
        again = [control.apply(tree) for tree in gold]
        assert again == trees                           # the same seed: the same trees
        if control.kind not in ("left-branching", "right-branching"):
            other = Control(control.kind, 2, control.labels, control.noise)
            differ = [other.apply(g).heads != t.heads for g, t in zip(gold, trees) if len(g) >= 5]
            assert sum(differ) > 0.5 * len(long)

"""``depnmt minimal-pairs`` (:mod:`depnmt.evaluation.minimalpairs`): every variant is its reference
with
exactly its category's one edit, checked token by token; the distances are recorded; only
English references are taken. And what ``contrastive`` makes of such a set
(:mod:`depnmt.evaluation.contrastivestats`): accuracy per category and distance bucket with
intervals,
and systems compared over their runs."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pytest
from lemminflect import getInflection, getLemma

from depnmt.evaluation.clustered import design_effect, sentence_ids
from depnmt.evaluation.contrastive import wilson
from depnmt.evaluation.contrastivestats import bucket, set_digest
from depnmt.evaluation.minimalpairs import CATEGORIES, joined, load_parser, make_pairs

from .conftest import run_cli

# reference -> its items: (category, variant, linear distance, tree distance)
HAND_WRITTEN = {
    "The keys to the cabinet are on the table.": {
        ("subject-verb", "The keys to the cabinet is on the table.", 4, 1),
        ("negation", "The keys to the cabinet are not on the table.", 1, 1)},
    "He didn't care for swimming.": {("negation", "He cared for swimming.", 1, 1)},
    "She doesn't like these books.": {
        ("subject-verb", "She don't like these books.", 1, 2),
        ("determiner", "She doesn't like this books.", 1, 1),
        ("negation", "She likes these books.", 1, 1)},
    "I can't go.": {("negation", "I can go.", 1, 1)},
    "The man who owns those cars is rich.": {
        ("subject-verb", "The man who owns those cars are rich.", 5, 1),
        ("determiner", "The man who owns that cars is rich.", 1, 1),
        ("negation", "The man who owns those cars is not rich.", 1, 1)},
    "They do n't know .": {("subject-verb", "They does n't know .", 1, 2),
                           ("negation", "They know .", 1, 1)},
    "He has a car.": {("subject-verb", "He have a car.", 1, 1),
                      ("determiner", "He has a cars.", 1, 1),
                      ("negation", "He does not have a car.", 1, 1)},
    "It isn't true.": {("subject-verb", "It aren't true.", 1, 1),
                       ("negation", "It is true.", 1, 1)},
    "The old dog slept.": {("negation", "The old dog did not sleep.", 1, 1),
                           ("adjective-noun", "The dog old slept.", 1, 1)},
    "You had better go.": set(),            # an idiom: no "not" after had; no agreement
}


def tokens(text: str) -> list[str]:
    """The words of ``text`` as spaCy's English tokenizer splits them, lower-cased (tokenized
    contractions joined first, as the references are parsed)."""
    return [t.text.lower() for t in load_parser().tokenizer(joined(text)[0])]


def changed(reference: str, variant: str) -> tuple[list[str], list[str], str]:
    """The tokens of ``reference`` and of ``variant`` between their common prefix and suffix,
    and the word after them (empty at the end)."""
    a, b = tokens(reference), tokens(variant)
    p = 0
    while p < min(len(a), len(b)) and a[p] == b[p]:
        p += 1
    q = 0
    while q < min(len(a), len(b)) - p and a[-1 - q] == b[-1 - q]:
        q += 1
    return a[p:len(a) - q], b[p:len(b) - q], (a[len(a) - q] if q else "")


def forms(base: str, tag: str) -> tuple[str, ...]:
    """lemminflect's forms of ``base`` as ``tag`` (for VBP, where it has none: the base)."""
    return getInflection(base, tag) or ((base,) if tag == "VBP" else ())


def verb_forms(word: str) -> set[str]:
    base = (getLemma(word, "AUX") or getLemma(word, "VERB"))[0]
    return {"is" if base == "be" else forms(base, "VBZ")[0],
            "are" if base == "be" else forms(base, "VBP")[0]}


def noun_forms(word: str) -> set[str]:
    base = getLemma(word, "NOUN")[0]
    return {base, *getInflection(base, "NNS")}


def is_negation_edit(old: list[str], new: list[str], after: str) -> bool:
    """``not``/``n't`` in or out, alone, with a contracted modal spelt out, or with the
    do-support it needs (``cares`` ↔ ``does not care``; ``know`` ↔ ``do n't know`` and ``put``
    ↔ ``did not put``, where the verb ``after`` the change keeps its form)."""
    if sorted([old, new]) == [[], ["not"]] or sorted([old, new]) in ([[], ["n't"]],):
        return True
    if (old, new) in (([m, "n't"], [full]) for m, full in (("ca", "can"), ("wo", "will"))):
        return True
    for short, long in ((old, new), (new, old)):
        if short == [] and len(long) == 2 and long[0] in ("do", "did") \
                and long[1] in ("not", "n't"):
            tag = {"did": "VBD", "do": "VBP"}[long[0]]
            return after in forms(getLemma(after, "VERB")[0], tag)
        if len(short) == 1 and len(long) == 3 and long[0] in ("do", "does", "did") \
                and long[1] in ("not", "n't") \
                and getLemma(short[0], "VERB")[0] == long[2]:
            tag = {"does": "VBZ", "did": "VBD", "do": "VBP"}[long[0]]
            return short[0] in forms(long[2], tag)
    return False


def is_category_edit(category: str, reference: str, variant: str) -> bool:
    """Whether ``variant`` is ``reference`` with exactly one edit of ``category``."""
    old, new, after = changed(reference, variant)
    if category == "subject-verb":
        return len(old) == len(new) == 1 and old != new and (
            {old[0], new[0]} == {"was", "were"} or {old[0], new[0]} == verb_forms(old[0]))
    if category == "determiner":
        return len(old) == len(new) == 1 and old != new and (
            {old[0], new[0]} in ({"this", "these"}, {"that", "those"})
            or {old[0], new[0]} <= noun_forms(old[0]))
    if category == "negation":
        return is_negation_edit(old, new, after)
    if category == "adjective-noun":
        return len(old) == len(new) == 2 and new == old[::-1]
    raise AssertionError(category)


def read_pairs(path: Path) -> list[list[str]]:
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "source\treference\tcontrastive\tcategory\tlinear_distance\ttree_distance"
    return [line.split("\t") for line in lines[1:]]


def test_hand_written_references_get_their_one_edit_and_distances():
    made = make_pairs(list(HAND_WRITTEN))
    for (reference, wanted), pairs in zip(HAND_WRITTEN.items(), made):
        assert {(p.category, p.variant, p.linear, p.tree) for p in pairs} == wanted, reference
        for p in pairs:
            assert is_category_edit(p.category, reference, p.variant), (reference, p)


def test_the_checker_refuses_what_is_not_the_categorys_edit():
    assert not is_category_edit("subject-verb", "He is here.", "He are there.")
    assert not is_category_edit("subject-verb", "He runs.", "He ran.")
    assert not is_category_edit("determiner", "this book", "the book")
    assert not is_category_edit("negation", "He didn't care.", "He care.")
    assert not is_category_edit("negation", "He is kind.", "He is not very kind.")
    assert not is_category_edit("adjective-noun", "a big red dog", "a dog red big")


def test_the_500_small_parallel_enja_references(shared_data, tmp_path, capsys):
    folder = shared_data / "small_parallel_enja"
    if not (folder / "test.en").exists():
        pytest.skip("small_parallel_enja not present")
    capsys.readouterr()
    assert run_cli(["minimal-pairs", "--src", folder / "test.ja", "--ref", folder / "test.en",
                    "-o", tmp_path / "pairs.tsv"]) == 0
    err = capsys.readouterr().err
    rows = read_pairs(tmp_path / "pairs.tsv")
    sources = (folder / "test.ja").read_text(encoding="utf-8").splitlines()
    references = (folder / "test.en").read_text(encoding="utf-8").splitlines()
    pairs_of = dict(zip(references, sources))
    counts = {c: sum(r[3] == c for r in rows) for c in CATEGORIES}
    assert sum(n >= 30 for n in counts.values()) >= 4, counts
    for category, n in counts.items():
        assert f"{category}: {n} pairs (" in err
    for source, reference, variant, category, linear, tree in rows:
        assert pairs_of[reference] == source
        assert is_category_edit(category, reference, variant), (category, reference, variant)
        assert int(linear) >= 1 and int(tree) >= 1
    assert max(int(r[4]) for r in rows if r[3] == "subject-verb") >= 4   # long-distance ones


def test_only_english_references_and_clean_input(tmp_path, capsys):
    (tmp_path / "test.ja").write_text("彼 は 来 た 。\n", encoding="utf-8")
    (tmp_path / "test.de").write_text("Er ist gekommen.\n", encoding="utf-8")
    (tmp_path / "test.en").write_text("He has come.\n", encoding="utf-8")
    capsys.readouterr()
    for args in (["--ref", tmp_path / "test.de"], ["--ref", tmp_path / "test.en", "-l", "de"]):
        assert run_cli(["minimal-pairs", "--src", tmp_path / "test.ja", *args,
                        "-o", tmp_path / "p.tsv"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: minimal pairs are made from English references only "
                              "(got 'de')") and err.count("\n") == 1
    (tmp_path / "two.en").write_text("He has come.\nShe\thas come.\n", encoding="utf-8")
    (tmp_path / "two.ja").write_text("a\nb\n", encoding="utf-8")
    assert run_cli(["minimal-pairs", "--src", tmp_path / "test.ja", "--ref", tmp_path / "two.en",
                    "-o", tmp_path / "p.tsv"]) == 2
    assert "2 lines, but" in capsys.readouterr().err
    assert run_cli(["minimal-pairs", "--src", tmp_path / "two.ja", "--ref", tmp_path / "two.en",
                    "-o", tmp_path / "p.tsv"]) == 2
    assert capsys.readouterr().err.startswith(f"error: {tmp_path / 'two.en'}:2: a tab")
    assert not (tmp_path / "p.tsv").exists()
    assert run_cli(["minimal-pairs", "--src", tmp_path / "test.ja", "--ref", tmp_path / "test.en",
                    "-o", tmp_path / "test.en"]) == 2
    assert "would replace the --ref file" in capsys.readouterr().err


# -- contrastive on a set with distances ---------------------------------------------------

@pytest.fixture(scope="module")
def pairs_tsv(shared_data, tmp_path_factory) -> Path:
    """Minimal pairs of 60 Multi30k test sentences, each its own source (mechanics only)."""
    root = tmp_path_factory.mktemp("pairs")
    with gzip.open(shared_data / "multi30k" / "test_2016_flickr.en.gz", "rt",
                   encoding="utf-8") as fh:
        lines = [next(fh) for _ in range(60)]
    (root / "test.src").write_text("".join(lines), encoding="utf-8")
    (root / "test.en").write_text("".join(lines), encoding="utf-8")
    assert run_cli(["minimal-pairs", "--src", root / "test.src", "--ref", root / "test.en",
                    "-o", root / "pairs.tsv"]) == 0
    return root / "pairs.tsv"


def test_contrastive_reports_accuracy_per_category_and_distance_bucket(tiny_model, pairs_tsv,
                                                                      tmp_path, capsys):
    rows = read_pairs(pairs_tsv)
    capsys.readouterr()
    assert run_cli(["contrastive", "-m", tiny_model, pairs_tsv, "-o", tmp_path / "r.json"]) == 0
    table = capsys.readouterr().out
    result = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    mine = result["models"][str(tiny_model)]
    assert result["set_sha256"] == set_digest(pairs_tsv)
    assert "By linear distance" in table and "By tree distance" in table
    for kind, column in (("linear", 4), ("tree", 5)):
        found = mine["by_distance"][kind]
        for category in {r[3] for r in rows}:
            for name in {bucket(int(r[column])) for r in rows if r[3] == category}:
                picked = [d for r, d in zip(rows, mine["decisions"])
                          if r[3] == category and bucket(int(r[column])) == name]
                acc = found[category][name]
                assert (acc["correct"], acc["total"]) == (sum(picked), len(picked))
                sentences = sentence_ids([r[0] for r, d in zip(rows, mine["decisions"])
                                          if r[3] == category and bucket(int(r[column])) == name])
                deff = design_effect(picked, sentences)
                assert acc["design_effect"] == round(deff, 4)
                assert acc["ci95"] == list(wilson(sum(picked) / deff, len(picked) / deff))
                low, high = acc["ci95"]
                assert f"| {category} | {name} | {len(picked)} | {100 * acc['accuracy']:.1f} " \
                       f"[{100 * low:.1f}, {100 * high:.1f}] |" in table
    # a set without distances prints what it did before: no distance tables
    plain = tmp_path / "plain.tsv"
    plain.write_text("".join("\t".join(r[:4]) + "\n" for r in rows), encoding="utf-8")
    assert run_cli(["contrastive", "-m", tiny_model, plain]) == 0
    assert "distance" not in capsys.readouterr().out


def test_a_bad_distance_is_named_by_file_and_line(tiny_model, tmp_path, capsys):
    bad = tmp_path / "bad.tsv"
    bad.write_text("a\tb\tc\tcat\t1\t1\na\tb\tc\tcat\tfar\t1\n", encoding="utf-8")
    capsys.readouterr()
    assert run_cli(["contrastive", "-m", tiny_model, bad]) == 2
    assert capsys.readouterr().err.startswith(f"error: {bad}:2: distance 'far'")


# -- systems compared over their runs ---------------------------------------------------------

def result_file(path: Path, set_path: Path, runs: list[list[int]], digest: bool = True
                ) -> Path:
    """A result file as ``contrastive -o`` writes it, with the given decisions per run
    (``digest``: with the set's SHA-256, as results written before it was recorded lack)."""
    recorded = {"set_sha256": set_digest(set_path)} if digest else {}
    path.write_text(json.dumps({"set": str(set_path), **recorded, "normalized": False,
                                "models": {f"seed{k}": {"decisions": d}
                                           for k, d in enumerate(runs)}}), encoding="utf-8")
    return path


def test_compare_finds_a_known_difference_and_not_between_equal_systems(pairs_tsv, tmp_path,
                                                                        capsys):
    rows = read_pairs(pairs_tsv)
    rng = random.Random(3)
    base = [[int(rng.random() < 0.6) for _ in rows] for _ in range(3)]
    # the same system with its runs in another order: equal
    same = [list(run) for run in base[::-1]]
    # better on negation only: right on every negation item
    better = [[1 if r[3] == "negation" else d for r, d in zip(rows, run)] for run in base]
    files = [result_file(tmp_path / f"{n}.json", pairs_tsv, runs)
             for n, runs in (("base", base), ("same", same), ("better", better))]
    capsys.readouterr()
    assert run_cli(["contrastive", pairs_tsv, "--compare", files[0], "--compare", files[1],
                    "--compare", files[2], "-o", tmp_path / "cmp.json"]) == 0
    table = capsys.readouterr().out
    assert "Holm" in table and "| negation |" in table
    written = json.loads((tmp_path / "cmp.json").read_text(encoding="utf-8"))
    assert written["tests"] == {"shuffles": 10_000, "seed": 12345}    # the p-values' draws
    tests = written["comparisons"]
    by = {(t["system"], t["group"]): t for t in tests}
    assert all(t["p"] == 1.0 for t in tests if t["system"] == str(files[1]))
    negation = by[str(files[2]), "negation"]
    assert negation["difference"] > 20 and negation["p_holm"] < 0.01
    assert all(t["p"] == 1.0 for t in tests if t["system"] == str(files[2])
               and t["group"] in [c for c in CATEGORIES if c != "negation"])
    assert all(t["p_holm"] >= t["p"] for t in tests)


def test_compare_refuses_results_of_another_set_or_with_models(pairs_tsv, tmp_path, capsys):
    n = len(read_pairs(pairs_tsv))
    good = result_file(tmp_path / "a.json", pairs_tsv, [[1] * n])
    other_set = tmp_path / "other.tsv"
    other_set.write_text("a\tb\tc\n", encoding="utf-8")
    short = result_file(tmp_path / "b.json", other_set, [[1]])
    capsys.readouterr()
    assert run_cli(["contrastive", pairs_tsv, "--compare", good, "--compare", short]) == 2
    assert capsys.readouterr().err.startswith(f"error: {short}: a result of another set")
    old = result_file(tmp_path / "old.json", pairs_tsv, [[1] * n], digest=False)
    assert run_cli(["contrastive", other_set, "--compare", short, "--compare", old]) == 2
    assert f"{old}: model seed0: {n} decisions, but the set has 1 items" in \
        capsys.readouterr().err
    twice = result_file(tmp_path / "c.json", pairs_tsv, [[1] * n, [0] * n])
    assert run_cli(["contrastive", pairs_tsv, "--compare", good, "--compare", twice]) == 2
    assert "compare systems of as many runs" in capsys.readouterr().err
    assert run_cli(["contrastive", pairs_tsv, "-m", tmp_path, "--compare", good,
                    "--compare", good]) == 2
    assert "leave out -m" in capsys.readouterr().err


def test_compare_shuffles_a_sentences_items_together():
    """Items made from one sentence are not independent: five copies of each sentence's
    decisions are the evidence of one item per sentence, not five times as much (the p-value
    of an item-by-item shuffle, 5x smaller here, would claim it)."""
    from depnmt.evaluation.contrastive import Item
    from depnmt.evaluation.contrastivestats import System, compare
    rng = random.Random(5)
    base = [[int(rng.random() < 0.6) for _ in range(24)] for _ in range(2)]
    better = [[1 if k % 4 == 0 else d for k, d in enumerate(run)] for run in base]

    def p_value(copies: int) -> float:
        items = [Item(f"source {k}", "ref", ["var"], "cat") for k in range(24)
                 for _ in range(copies)]
        def runs(decisions):
            return [[d for d in run for _ in range(copies)] for run in decisions]
        rows = compare(items, [System("base", runs(base)), System("better", runs(better))],
                       shuffles=2000)
        return next(r["p"] for r in rows if r["group"] == "**all**")

    assert 0.01 < p_value(1) < 0.5
    assert p_value(5) == p_value(1)


def margin_file(path: Path, set_path: Path, runs: list[list[float]]) -> Path:
    """A result file of ``contrastive -o`` whose runs record ``runs``' margins (and the
    decisions they make)."""
    result_file(path, set_path, [[int(m > 0) for m in run] for run in runs])
    data = json.loads(path.read_text(encoding="utf-8"))
    for record, margins in zip(data["models"].values(), runs):
        record["margins"] = margins
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_compare_finds_a_margin_difference_where_accuracy_is_at_ceiling(pairs_tsv, tmp_path,
                                                                       capsys):
    """Both systems decide every item right (accuracy 100 %: nothing to find), one with
    margins 0.3 nats larger on negation: the margin rows find it, and nothing else; the same
    system with its runs reordered: p = 1; a file without margins: accuracy rows only."""
    rows = read_pairs(pairs_tsv)
    rng = random.Random(5)
    base = [[0.5 + rng.expovariate(1.0) for _ in rows] for _ in range(3)]
    better = [[m + (0.3 if r[3] == "negation" else 0.0) for r, m in zip(rows, run)]
              for run in base]
    files = [margin_file(tmp_path / f"{n}.json", pairs_tsv, runs)
             for n, runs in (("base", base), ("same", base[::-1]), ("better", better))]
    capsys.readouterr()
    assert run_cli(["contrastive", pairs_tsv, *[a for f in files for a in ("--compare", f)],
                    "-o", tmp_path / "cmp.json"]) == 0
    assert "Mean margin (nats)" in capsys.readouterr().out
    tests = json.loads((tmp_path / "cmp.json").read_text(encoding="utf-8"))["comparisons"]
    accuracy = [t for t in tests if t["measure"] == "accuracy"]
    assert accuracy and all(t["p"] == 1.0 and t["difference"] == 0 for t in accuracy)
    margin = {(t["system"], t["group"]): t for t in tests if t["measure"] == "margin"}
    assert all(t["p"] == 1.0 for (system, _), t in margin.items() if system == str(files[1]))
    negation = margin[str(files[2]), "negation"]
    assert negation["difference"] == pytest.approx(0.3) and negation["p_holm"] < 0.01
    assert all(t["p"] == 1.0 for (system, group), t in margin.items()
               if system == str(files[2]) and group in CATEGORIES and group != "negation")
    plain = result_file(tmp_path / "plain.json", pairs_tsv, [[1] * len(rows)] * 3)
    assert run_cli(["contrastive", pairs_tsv, "--compare", files[0], "--compare", plain]) == 0
    assert "Mean margin" not in capsys.readouterr().out


def test_compare_refuses_margins_that_contradict_their_decisions(pairs_tsv, tmp_path, capsys):
    n = len(read_pairs(pairs_tsv))
    good = margin_file(tmp_path / "good.json", pairs_tsv, [[1.0] * n])
    bad = margin_file(tmp_path / "bad.json", pairs_tsv, [[1.0] * n])
    data = json.loads(bad.read_text(encoding="utf-8"))
    data["models"]["seed0"]["margins"][0] = -1.0        # a decision right, its margin < 0
    bad.write_text(json.dumps(data), encoding="utf-8")
    capsys.readouterr()
    assert run_cli(["contrastive", pairs_tsv, "--compare", good, "--compare", bad]) == 2
    assert capsys.readouterr().err == (f"error: {bad}: model seed0: its margins do not fit its "
                                       f"decisions (one number per item, > 0 where it decided "
                                       f"right)\n")

"""The results page's verdict table of one question on every measure (``bench/results_page.py``,
:class:`Evidence`): generated from constructed archives, a known difference is resolved on BLEU,
test NLL and minimal pairs, equal systems are not, and runs without a measure are counted as
not archived, never dropped; a seed's rerun replaces the run it reran."""

from __future__ import annotations

import json
import random
import shutil

import pytest

from tests.scripts import load_script

from .conftest import copy_run
from .test_report import noisy_copies, write_likelihood

gen = load_script("results_page")
ITEMS = 200


def pairs_set(root) -> str:
    """A minimal-pair set of :data:`ITEMS` items (two categories, distances, two items a
    sentence) in ``root``, outside the archive, which keeps its index (no text)."""
    lines = ["source\treference\tcontrastive\tcategory\tlinear_distance\ttree_distance"]
    lines += [f"s {i // 2}\tr {i}\tc {i}\t{'agreement' if i % 2 else 'negation'}\t"
              f"{1 + i % 3}\t1" for i in range(ITEMS)]
    (root / "archive").mkdir(parents=True, exist_ok=True)
    (root / "pairs.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert gen.main(["--set-index", str(root / "pairs.tsv"),
                     str(root / "archive" / "pairs.index.tsv")]) == 0
    return "archive/pairs.index.tsv"


def write_decisions(root, hyp, accuracy: float, seed: int, margins: bool = True) -> None:
    """``HYP.minimal-pairs.json`` as ``depnmt contrastive -o`` writes it: one model, each item
    decided correctly with probability ``accuracy``, its margin (where ``margins``: files of
    earlier versions have none) 0.1–2 nats on the side of its decision."""
    from depnmt.evaluation.contrastivestats import set_digest
    rng = random.Random(seed)
    decisions = [int(rng.random() < accuracy) for _ in range(ITEMS)]
    model = {"decisions": decisions}
    if margins:
        model["margins"] = [(1 if d else -1) * rng.uniform(0.1, 2.0) for d in decisions]
    hyp.with_name(hyp.name + gen.PAIRS_SUFFIX).write_text(json.dumps({
        "set": "pairs.tsv", "format": "tsv", "normalized": False,
        "set_sha256": set_digest(root / "pairs.tsv"),
        "models": {"model": model}}), encoding="utf-8")


def archive_runs(root, tiny_model, ref, folder: str, system: dict, seeds: range,
                 skip: tuple[str, ...] = ()) -> list:
    """One archived run per seed in ``root/archive/FOLDER-seedN`` (``models/abs+dep+rel``,
    its hypotheses dropping ``system["drop"]`` of the reference's words, its test likelihood
    of ``system["nll"]`` a word and its minimal-pair decisions at ``system["pairs"]``
    accuracy; ``skip``: the files of those left out)."""
    words = [len(line.split()) for line in ref.read_text(encoding="utf-8").splitlines()]
    runs = []
    for seed in seeds:
        run = gen.Run(f"archive/{folder}-seed{seed}", "abs+dep+rel")
        (root / run.dir / "hyps").mkdir(parents=True)
        copy_run(tiny_model, root / run.dir / "models" / run.folder, seed)
        hyp, = noisy_copies(ref, root / run.dir / "hyps", "x", system["drop"],
                            range(seed, seed + 1))
        hyp = hyp.rename(root / run.dir / "hyps" / f"{run.folder}.de")
        if "nll" not in skip:
            write_likelihood(hyp, words, system["nll"], seed, noise=0.02)
        if "pairs" not in skip:
            write_decisions(root, hyp, system["pairs"], seed, "margins" not in skip)
        runs.append(run)
    return runs


def evidence(tree_runs, random_runs, pairs: str) -> object:
    return gen.Evidence("ev", "Do trees beat random trees?",
                        gen.Seeded("tree", tuple((r,) for r in tree_runs)),
                        gen.Seeded("random", tuple((r,) for r in random_runs)),
                        "test.raw.de", "de", ("--shuffles", "999", "--bootstrap", "99"), pairs,
                        (("bleu", 0.5), ("nll", 0.01), (gen.PAIRS, 1.0)))


@pytest.fixture
def archive(tmp_path, monkeypatch, tiny_bpe):
    """A repository root of its own (``REPO``), the corpus folder its reference is read from."""
    monkeypatch.setattr(gen, "REPO", tmp_path)
    monkeypatch.setenv("DEPNMT_DATA_DIR", str(tiny_bpe.parent / "prepare"))
    return tmp_path, tiny_bpe.parent / "prepare" / "test.raw.de"


def rows(text: str) -> dict[str, list[str]]:
    """The verdict table's rows by measure."""
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    return {cells[0]: cells for cells in
            ([c.strip() for c in line.strip("|").split("|")] for line in lines[1:])}


@pytest.mark.slow
def test_a_known_difference_is_resolved_on_every_measure(archive, tiny_model):
    """The tree runs translate better (fewer words dropped), give the references 0.2 nats a word
    more and decide 90 % of the pairs against 60 %: each measure says resolved, **yes**."""
    root, ref = archive
    pairs = pairs_set(root)
    tree = archive_runs(root, tiny_model, ref, "tree", {"drop": 0.05, "nll": 1.8,
                                                         "pairs": 0.9}, range(1, 4))
    rand = archive_runs(root, tiny_model, ref, "rand", {"drop": 0.5, "nll": 2.0,
                                                         "pairs": 0.6}, range(11, 14))
    text = gen.evidence_block(evidence(tree, rand, pairs))
    table = rows(text)
    assert table["BLEU"][1] == "3 + 3" and float(table["BLEU"][4].split()[0]) > 10
    assert table["test NLL/word"][4].startswith("-0.2")
    assert 20 < float(table["minimal-pair accuracy (%)"][4].split()[0]) < 40    # ~ +30 points
    assert float(table["minimal-pair margin (nats)"][4].split()[0]) > 0.3       # ~ +0.63
    for label in ("BLEU", "test NLL/word", "minimal-pair accuracy (%)",
                  "minimal-pair margin (nats)"):
        assert f"- **{label}: resolved at 3 runs a side**: " in text, label
        assert table[label][7].startswith("±")
    for label in ("BLEU", "test NLL/word", "minimal-pair accuracy (%)"):
        assert table[label][8].startswith("Δ ")
    verdicts = text.split("\n\nRuns: ")[0]
    assert verdicts.count("**yes**") == 4 and "not archived" not in verdicts
    assert "**Do trees beat random trees?** BLEU resolved at 3 runs a side (Δ +" in text
    by_group = gen.pairs_block(evidence(tree, rand, pairs))     # by category and distance
    assert by_group.startswith("Baseline: random. Accuracy pooled over each system's 3 run(s)")
    by_group, margins = by_group.split("\nMean margin (nats): ")
    groups = {row.split(" | ")[1]: row.split(" | ") for row in by_group.splitlines()
              if row.startswith("| tree |")}
    margin = next(row.split(" | ") for row in margins.splitlines()
                  if row.startswith("| tree | **all** |"))
    assert float(margin[5]) > 0.3 and float(margin[7].rstrip(" |")) < 0.01
    assert list(groups) == ["**all**", "agreement", "negation", "agreement, linear 1",
                            "agreement, linear 2–3", "negation, linear 1", "negation, linear 2–3"]
    assert float(groups["**all**"][5]) > 20 and float(groups["**all**"][7].rstrip(" |")) < 0.01
    assert groups["**all**"][2] == str(ITEMS)


@pytest.mark.slow
def test_equal_systems_are_not_resolved_and_missing_measures_are_counted(archive, tiny_model):
    """Two systems of the same quality: not resolved on BLEU (with the difference the runs
    resolve); a tree run archived without its test likelihood and minimal pairs makes those
    measures "not archived", the run counted, not dropped; so does a random-tree run whose
    decisions record no margins (an earlier version's) for the margin."""
    root, ref = archive
    pairs = pairs_set(root)
    same = {"drop": 0.3, "nll": 2.0, "pairs": 0.7}
    tree = archive_runs(root, tiny_model, ref, "tree", same, range(1, 3))
    tree += archive_runs(root, tiny_model, ref, "tree", same, range(3, 4), skip=("nll", "pairs"))
    rand = archive_runs(root, tiny_model, ref, "rand", same, range(11, 13))
    rand += archive_runs(root, tiny_model, ref, "rand", same, range(13, 14), skip=("margins",))
    text = gen.evidence_block(evidence(tree, rand, pairs))
    table = rows(text)
    assert "- **BLEU: not resolved at 3 runs a side**: Δ " in text
    assert "**not shown** (only differences beyond ±" in text
    for label in ("test NLL/word", "minimal-pair accuracy (%)"):
        assert table[label][2:4] == ["not archived (1 of 3 runs without)",
                                     "not archived (0 of 3 runs without)"]
        assert f"- **{label}: not archived** (tree: 1 of 3 runs without): " in text
    assert table["minimal-pair margin (nats)"][2:4] == ["not archived (1 of 3 runs without)",
                                                        "not archived (1 of 3 runs without)"]
    assert ("test NLL/word not archived; minimal-pair accuracy (%) not archived; minimal-pair "
            "margin (nats) not archived.") in text
    assert gen.pairs_block(evidence(tree, rand, pairs)).startswith(
        "Not every run of the question has its minimal-pair decisions archived yet")


def test_the_archive_keeps_the_sets_index_without_its_text(tmp_path):
    """The set's text is the test set's: the archive keeps per item only its sentence, its
    category and its distances, and the SHA-256 the decisions are checked against."""
    from depnmt.evaluation.contrastivestats import set_digest
    index = tmp_path / pairs_set(tmp_path)
    text = index.read_text(encoding="utf-8")
    assert " r 3" not in text and "c 3" not in text and "s 1" not in text
    items, digest = gen.read_set_index(index)
    assert digest == set_digest(tmp_path / "pairs.tsv") and len(items) == ITEMS
    assert [(it.source, it.category, it.linear, it.tree) for it in items[:3]] == [
        ("sentence 0", "negation", 1, 1), ("sentence 0", "agreement", 2, 1),
        ("sentence 1", "negation", 3, 1)]
    assert text.splitlines()[2:4] == ["0\tnegation\t1\t1", "0\tagreement\t2\t1"]


def test_a_seeds_rerun_replaces_the_run_it_reran(tmp_path, monkeypatch):
    """One run per seed: the rerun where archived, else the run it reran; a seed with neither
    is left out; no archived run at all: the page says so and shows the command."""
    monkeypatch.setattr(gen, "REPO", tmp_path)
    new, old = gen.Run("rerun/s1", "abs+dep+rel"), gen.Run("old/s1", "dep+rel")
    new2, old2 = gen.Run("rerun/s2", "abs+dep+rel"), gen.Run("old/s2", "dep+rel")
    runs = gen.Seeded("tree", ((new, old), (new2, old2), (gen.Run("rerun/s3", "x"),)))
    assert runs.chosen() == []
    ev = evidence([], [], "pairs.tsv")
    ev = gen.Evidence(ev.name, ev.question, runs, gen.Seeded("random", ((old,),)), *(
        getattr(ev, f) for f in ("ref", "lang", "options", "pairs_set", "deltas")))
    assert gen.evidence_block(ev).startswith("No run of this question is archived yet")
    for run in (old, new2, old2):
        (tmp_path / run.dir / "models" / run.folder).mkdir(parents=True)
    assert runs.chosen() == [old, new2]
    assert ev.archived()
    args = ev.comparison().argv("out")
    assert "rerun/s2/models/abs+dep+rel" in args and "old/s2/models/dep+rel" not in args


@pytest.mark.slow
def test_each_rerun_is_compared_with_its_twin(archive, tiny_model):
    """A rerun that is its twin's copy is reproduced bit for bit; one with other hypotheses and
    another dev NLL is not, and the row says at which validation they part."""
    root, ref = archive
    pairs_set(root)
    same = {"drop": 0.3, "nll": 2.0, "pairs": 0.7}
    twins = archive_runs(root, tiny_model, ref, "old", same, range(1, 3))
    copy = gen.Run("archive/new-seed1", "abs+dep+rel")
    shutil.copytree(root / twins[0].dir, root / copy.dir)
    other, = archive_runs(root, tiny_model, ref, "new", {**same, "drop": 0.2}, range(2, 3))
    metrics = root / other.dir / "models" / other.folder / "metrics.jsonl"
    records = [json.loads(line) for line in metrics.read_text(encoding="utf-8").splitlines()]
    first = next(r for r in records if r["event"] == "valid")
    old_nll, first["dev_nll"] = first["dev_nll"], first["dev_nll"] + 0.001
    metrics.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    ev = evidence([], [], "pairs.tsv")
    ev = gen.Evidence(ev.name, ev.question, gen.Seeded("tree", ((copy, twins[0]),
                                                                (other, twins[1]))),
                      gen.Seeded("random", ((twins[0],),)),
                      *(getattr(ev, f) for f in ("ref", "lang", "options", "pairs_set", "deltas")))
    text = gen.twins_block(ev)
    table = [line.split(" | ") for line in text.splitlines() if line.startswith("| tree")]
    assert [(row[1], row[5]) for row in table] == [("1", "yes"), ("2", "no")]
    assert table[0][4] == "+0.00" and table[0][6] == "none |"
    assert float(table[1][3]) > float(table[1][2])           # it drops fewer words
    assert table[1][6] == f"step {first['step']}: {old_nll:.4f} → {old_nll + 0.001:.4f} |"
    assert "Reproduced bit for bit (the same hypotheses and the same dev NLL at every " \
           "validation): 1 of 2 reruns." in text
    assert gen.twins_block(gen.Evidence(*[getattr(ev, f) for f in (
        "name", "question")], gen.Seeded("tree", ((twins[0],),)), ev.baseline, *(
        getattr(ev, f) for f in ("ref", "lang", "options", "pairs_set", "deltas")))
    ).startswith("No rerun is archived yet.")

"""``depnmt contrastive`` (:mod:`depnmt.evaluation.contrastive`): per-category accuracy of one model
and of
several, the same decisions from every format, and bad sets named by file and line."""

from __future__ import annotations

import gzip
import json
import math
import random
from pathlib import Path

import pytest

from depnmt.evaluation.clustered import mcnemar_exact, sentence_ids, sign_flip_p
from depnmt.evaluation.contrastive import wilson

from .conftest import TINY_MODEL, run_cli

ARTICLES = {"der": "das", "die": "der", "das": "die", "den": "das", "dem": "der"}


def contrastive_items(shared_data: Path, n: int = 60) -> list[tuple[str, str, str, str]]:
    """A small contrastive set from Multi30k's test_2016_flickr (En→De): for each pair, the
    reference against the reference with its first German definite article of another gender
    (``article``), with two adjacent words in the middle swapped (``swap``), and without its
    last word before the full stop (``drop``)."""
    rng = random.Random(5)
    lines = {}
    for lang in ("en", "de"):
        with gzip.open(shared_data / "multi30k" / f"test_2016_flickr.{lang}.gz", "rt",
                       encoding="utf-8") as fh:
            lines[lang] = [next(fh).rstrip("\n") for _ in range(n)]
    items = []
    for src, ref in zip(lines["en"], lines["de"]):
        words = ref.split()
        for i, w in enumerate(words):
            if w.lower() in ARTICLES:
                wrong = ARTICLES[w.lower()]
                items.append((src, ref, " ".join([*words[:i], wrong.capitalize() if w[0].isupper()
                                                  else wrong, *words[i + 1:]]), "article"))
                break
        if len(words) > 4:
            i = rng.randrange(1, len(words) - 3)
            swapped = [*words[:i], words[i + 1], words[i], *words[i + 2:]]
            if swapped != words:
                items.append((src, ref, " ".join(swapped), "swap"))
            items.append((src, ref, " ".join(words[:-2] + words[-1:]), "drop"))
    return items


@pytest.fixture(scope="module")
def models(tiny_bpe, tmp_path_factory) -> list[Path]:
    root = tmp_path_factory.mktemp("contrastive")
    for seed in (1, 2):
        assert run_cli(["train", "-i", tiny_bpe, "-o", root / f"s{seed}", *TINY_MODEL,
                        "--max-steps", "150", "--valid-every", "1000", "--seed", seed]) == 0
    return [root / "s1", root / "s2"]


@pytest.fixture(scope="module")
def tsv(shared_data, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("set") / "set.tsv"
    path.write_text("source\treference\tcontrastive\tcategory\n" + "".join(
        "\t".join(item) + "\n" for item in contrastive_items(shared_data)), encoding="utf-8")
    return path


def test_one_model_per_category_decisions_are_the_forced_scores(models, tsv, tmp_path, capsys):
    items = [line.split("\t") for line in tsv.read_text(encoding="utf-8").splitlines()[1:]]
    capsys.readouterr()
    assert run_cli(["contrastive", "-m", models[0], tsv, "-o", tmp_path / "r.json"]) == 0
    table = capsys.readouterr().out
    result = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    mine = result["models"][str(models[0])]
    from depnmt.storage.modeldir import default_checkpoint
    assert result["checkpoints"] == {str(models[0]): [str(default_checkpoint(models[0]))]}
    counts = {c: sum(1 for it in items if it[3] == c) for c in ("article", "swap", "drop")}
    assert result["categories"] == sorted(counts) and min(counts.values()) >= 10
    for category, n in counts.items():
        assert mine["by_category"][category]["total"] == n
        row = next(r for r in table.splitlines() if r.startswith(f"| {category} |"))
        acc = mine["by_category"][category]
        assert f"| {n} | {100 * acc['accuracy']:.1f} [" in row
        low, high = acc["ci95"]
        assert low <= acc["accuracy"] <= high
    assert "| **all** |" in table and mine["all"]["total"] == len(items)
    # the decisions are the reference's log-probability against the variant's (depnmt rescore)
    (tmp_path / "src").write_text("".join(it[0] + "\n" for it in items), encoding="utf-8")
    for i, column in ((1, "ref"), (2, "var")):
        (tmp_path / column).write_text("".join(it[i] + "\n" for it in items), encoding="utf-8")
        assert run_cli(["rescore", "-m", models[0], "--src", tmp_path / "src",
                        "--tgt", tmp_path / column, "-o", tmp_path / f"{column}.scores"]) == 0
    ref, var = ([float(line.split("\t")[1]) for line in
                 (tmp_path / f"{c}.scores").read_text(encoding="utf-8").splitlines()]
                for c in ("ref", "var"))
    assert mine["decisions"] == [int(r > v) for r, v in zip(ref, var)]
    # and each margin is the reference's log-probability less the variant's
    assert mine["margins"] == pytest.approx([r - v for r, v in zip(ref, var)], abs=1e-3)


def test_several_models_and_every_format(models, tsv, tmp_path, capsys):
    items = [line.split("\t") for line in tsv.read_text(encoding="utf-8").splitlines()[1:]]
    capsys.readouterr()
    assert run_cli(["contrastive", "-m", models[0], "-m", models[1], tsv,
                    "-o", tmp_path / "two.json"]) == 0
    table = capsys.readouterr().out
    two = json.loads((tmp_path / "two.json").read_text(encoding="utf-8"))
    assert str(models[1]) in table and "mean ± sd" in table
    first, second = (two["models"][str(m)] for m in models)
    # items of one source sentence go together: a sign-flip test over sentences, not McNemar's
    sentence = sentence_ids([it[0] for it in items])
    assert len(set(sentence)) < len(items)
    assert "Sign-flip permutation test over source sentences" in table
    assert (second["test_vs_first"], second["p_vs_first"]) == (
        "sign-flip", sign_flip_p(first["decisions"], second["decisions"], sentence))
    assert "mcnemar_p_vs_first" not in second
    one_each = tmp_path / "one-each.tsv"      # a set with one item a sentence: McNemar's
    one_each.write_text("".join("\t".join(it) + "\n" for it in
                                {it[0]: it for it in items}.values()), encoding="utf-8")
    assert run_cli(["contrastive", "-m", models[0], "-m", models[1], one_each,
                    "-o", tmp_path / "one.json"]) == 0
    assert "Exact McNemar test" in capsys.readouterr().out
    a, b = json.loads((tmp_path / "one.json").read_text(encoding="utf-8"))["models"].values()
    assert b["test_vs_first"] == "mcnemar"
    assert b["mcnemar_p_vs_first"] == b["p_vs_first"] == mcnemar_exact(a["decisions"],
                                                                        b["decisions"])
    # LingEval97's JSON: one entry per source with its errors; the same decisions
    entries: dict = {}
    for src, ref, var, cat in items:
        entries.setdefault((src, ref), []).append({"type": cat, "contrastive": var})
    lingeval = tmp_path / "lingeval97.json"
    lingeval.write_text(json.dumps([{"source": s, "reference": r, "origin": "x", "errors": e}
                                    for (s, r), e in entries.items()]), encoding="utf-8")
    assert run_cli(["contrastive", "-m", models[0], lingeval, "-o", tmp_path / "le.json"]) == 0
    le = json.loads((tmp_path / "le.json").read_text(encoding="utf-8"))["models"][str(models[0])]
    order = [(s, r, e["contrastive"]) for (s, r), es in entries.items() for e in es]
    by_item = dict(zip([(s, r, v) for s, r, v, _ in items], first["decisions"]))
    assert le["decisions"] == [by_item[key] for key in order]
    # ContraPro: the json and its text; an entry is right when the reference beats every variant
    contrapro = tmp_path / "contrapro.json"
    contrapro.write_text(json.dumps([{"src pronoun": "It", "ref pronoun": "Er", "errors": es,
                                      "source": s} for (s, _), es in entries.items()]),
                         encoding="utf-8")
    src_lines = [s for (s, _), es in entries.items() for _ in range(1 + len(es))]
    tgt_lines = [x for (_, r), es in entries.items() for x in [r, *(e["contrastive"] for e in es)]]
    (tmp_path / "cp.en").write_text("\n".join(src_lines) + "\n", encoding="utf-8")
    (tmp_path / "cp.de").write_text("\n".join(tgt_lines) + "\n", encoding="utf-8")
    capsys.readouterr()
    assert run_cli(["contrastive", "-m", models[0], contrapro, "--src", tmp_path / "cp.en",
                    "--tgt", tmp_path / "cp.de", "-o", tmp_path / "cp.json"]) == 0
    assert "| it:er |" in capsys.readouterr().out
    cp = json.loads((tmp_path / "cp.json").read_text(encoding="utf-8"))["models"][str(models[0])]
    wanted = [int(all(by_item[s, r, e["contrastive"]] for e in es)) for (s, r), es in entries.items()]
    assert cp["decisions"] == wanted


def test_bad_sets_are_named_by_file_and_line(models, tmp_path, capsys):
    bad = tmp_path / "bad.tsv"
    bad.write_text("a\tb\tc\tcat\nonly two\tcolumns\n", encoding="utf-8")
    capsys.readouterr()
    assert run_cli(["contrastive", "-m", models[0], bad]) == 2
    assert capsys.readouterr().err.startswith(f"error: {bad}:2: expected source TAB reference")
    cp = tmp_path / "c.json"
    cp.write_text(json.dumps([{"src pronoun": "it", "ref pronoun": "es", "errors": [{}]}]),
                  encoding="utf-8")
    (tmp_path / "x.en").write_text("a\n", encoding="utf-8")
    assert run_cli(["contrastive", "-m", models[0], cp, "--src", tmp_path / "x.en",
                    "--tgt", tmp_path / "x.en"]) == 2
    assert "1 lines, but" in capsys.readouterr().err
    (tmp_path / "n.json").write_text("{}", encoding="utf-8")
    assert run_cli(["contrastive", "-m", models[0], tmp_path / "n.json"]) == 2
    assert "expected a JSON list" in capsys.readouterr().err
    # entries of a JSON list are counted from 1, as a reader counts them
    (tmp_path / "l.json").write_text(json.dumps([{"source": "a", "reference": "b",
                                                  "errors": [{"contrastive": "c"}]}]),
                                     encoding="utf-8")
    assert run_cli(["contrastive", "-m", models[0], tmp_path / "l.json"]) == 2
    assert "l.json: entry 1: expected a non-empty string 'type'" in capsys.readouterr().err


def test_wilson_and_mcnemar():
    low, high = wilson(8, 10)
    assert math.isclose(low, 0.4902, abs_tol=1e-4) and math.isclose(high, 0.9433, abs_tol=1e-4)
    assert wilson(0, 5)[0] == 0.0 and wilson(5, 5)[1] == 1.0
    assert math.isclose(mcnemar_exact([True] * 6, [False] * 6), 2 * 0.5 ** 6)
    assert mcnemar_exact([True, False], [True, False]) == 1.0
    assert math.isclose(mcnemar_exact([True] * 5 + [False] * 5, [False] * 5 + [True] * 5), 1.0)

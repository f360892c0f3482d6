"""Trust audit of the commands whose numbers and files are published or shipped: ``average``,
``export``, ``score`` and ``controls``. A number or a file that belongs to something else is
refused (or said), never given with exit 0."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import TINY_MODEL, import_random_trees, run_cli
from .test_report import write_hyps

LABELS = ["nsubj", "obj", "det", "amod"]


# ---------------------------------------------------------------------------------------------
# controls: a run on control trees is not a run on the parser's trees

@pytest.fixture(scope="module")
def tree_folders(tiny_bpe, tmp_path_factory) -> dict[str, Path]:
    """A parse folder of source trees (``parser``) and control folders of it:
    ``random-projective`` (seed 1), ``random-projective-7`` (seed 7) and ``noise`` (p 0.5)."""
    root = tmp_path_factory.mktemp("tree-folders")
    parse = import_random_trees(tiny_bpe, root / "given", "parse-audit-outputs", ("en",),
                                LABELS, seed=5)
    folders = {"parser": parse}
    for name, args in (("random-projective", ["--kind", "random-projective"]),
                       ("random-projective-7", ["--kind", "random-projective", "--seed", "7"]),
                       ("noise", ["--kind", "noise", "--noise", "0.5"])):
        folders[name] = root / f"ctl-{name}"
        assert run_cli(["controls", "-i", parse, "-o", folders[name], *args]) == 0
    return folders


@pytest.fixture(scope="module")
def tree_runs(tree_folders, tiny_bpe, tmp_path_factory) -> dict[str, Path]:
    """abs+dep+rel trained 2 updates on each of :func:`tree_folders` (by its name), with
    training seeds 1, 2, 3 and 4."""
    root = tmp_path_factory.mktemp("tree-runs")
    models = {}
    for seed, (name, trees) in enumerate(tree_folders.items(), 1):
        models[name] = root / f"model-{name}"
        assert run_cli(["train", "-i", tiny_bpe, "-t", trees, "-o", models[name], *TINY_MODEL,
                        "--scheme", "abs+dep+rel", "--max-steps", "2", "--valid-every", "2",
                        "--seed", seed]) == 0
    return models


def report(tiny_bpe, tmp_path, runs: list[tuple[str, Path]]) -> int:
    """``depnmt report`` of ``runs`` (system name, model folder), each with hypotheses of its
    own."""
    ref, good, _ = write_hyps(tiny_bpe, tmp_path)
    lines = good.read_text(encoding="utf-8").splitlines()
    args = []
    for i, (name, model) in enumerate(runs):
        hyp = tmp_path / f"hyp{i}.de"
        hyp.write_text("\n".join(lines[:i] + lines[i + 1:] + lines[i:i + 1]) + "\n",
                       encoding="utf-8")
        args += ["-s", name, model, hyp]
    return run_cli(["report", "-r", ref, "--shuffles", "20", "--bootstrap", "20", *args])


def test_report_refuses_a_system_of_real_and_control_tree_runs(tree_runs, tiny_bpe, tmp_path,
                                                               capsys):
    """One system's runs trained on the parser's trees and on control trees (the same scheme,
    so the scheme check passes) would average a control into the real-tree system."""
    capsys.readouterr()
    assert report(tiny_bpe, tmp_path, [("tree", tree_runs["parser"]),
                                       ("tree", tree_runs["random-projective"])]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: system 'tree' mixes runs on different trees: ")
    assert "the parser's trees" in err and "random-projective" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_report_refuses_a_system_of_two_control_kinds(tree_runs, tiny_bpe, tmp_path, capsys):
    capsys.readouterr()
    assert report(tiny_bpe, tmp_path, [("ctl", tree_runs["random-projective"]),
                                       ("ctl", tree_runs["noise"])]) == 2
    err = capsys.readouterr().err
    assert "mixes runs on different trees" in err and "noise p=0.5" in err


def test_report_takes_control_runs_of_one_kind_with_other_control_seeds(tree_runs, tiny_bpe,
                                                                       tmp_path):
    """A control's seed is a replicate's (one control run per seed), so it may differ."""
    assert report(tiny_bpe, tmp_path, [("ctl", tree_runs["random-projective"]),
                                       ("ctl", tree_runs["random-projective-7"]),
                                       ("tree", tree_runs["parser"])]) == 0


def test_a_control_model_refuses_a_control_folders_trees(tree_folders, tree_runs, tiny_bpe,
                                                          tmp_path, capsys):
    """A model trained on control trees applies its control to the trees it is given: the
    control folder's own test trees would be controlled twice (other trees than the folder's
    for ``noise``), translated and scored with exit 0."""
    from depnmt.decoding.translate import Translator
    from depnmt.stages.parse import read_conllu
    model, parser, control = (tree_runs["noise"], tree_folders["parser"],
                              tree_folders["noise"])
    given, wanted = (list(read_conllu(f / "test.en.conllu")) for f in (parser, control))
    translator = Translator.from_model_dir(model, device="cpu")
    words = [tree.words for tree in given]
    twice = [ex.src_tree for ex in translator.examples(words, wanted)]
    assert [ex.src_tree for ex in translator.examples(words, given)] == wanted
    assert sum(a.heads != b.heads for a, b in zip(twice, wanted)) > len(wanted) / 4
    tgt = tiny_bpe.parent / "prepare" / "test.raw.de"
    for command in (["translate", "--input-format", "conllu", "-i"],
                    ["rescore", "--tgt", tgt, "--src-format", "conllu", "--src"]):
        out = tmp_path / f"{command[0]}.out"
        capsys.readouterr()
        assert run_cli([*command, control / "test.en.conllu", "-m", model, "-o", out]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {control / 'test.en.conllu'}: control trees")
        assert f"give the parser's trees, {parser.resolve() / 'test.en.conllu'}" in err
        assert len(err.strip().splitlines()) == 1 and not out.exists()
        assert run_cli([*command, parser / "test.en.conllu", "-m", model, "-o", out]) == 0


# ---------------------------------------------------------------------------------------------
# score: BLEU by source length counts words

JA_WORDS = ["道元 は 鎌倉 時代 初期 の 禅僧 で ある 。",
            "曹洞宗 の 開祖 と し て 知ら れ て いる 。 " * 3,
            "晩年 に は 永平寺 を 開い た 。"]


def test_score_refuses_length_buckets_of_an_unsegmented_source(tmp_path, capsys):
    """A Japanese source without spaces is one "word" a line: every sentence fell into the
    first bucket, whose BLEU was then the corpus BLEU, with exit 0."""
    ref, hyp = tmp_path / "ref.en", tmp_path / "hyp.en"
    ref.write_text("a b c d e\nf g h i j\nk l m n o\n", encoding="utf-8")
    hyp.write_text("a b c d e\nf g h\nk l m n o\n", encoding="utf-8")
    raw, tokenized = tmp_path / "test.raw.ja", tmp_path / "test.ja"
    raw.write_text("".join(line.replace(" ", "") + "\n" for line in JA_WORDS), encoding="utf-8")
    tokenized.write_text("".join(line.strip() + "\n" for line in JA_WORDS), encoding="utf-8")
    plot = tmp_path / "delta.png"
    args = ["score", "-r", ref, "--metrics", "bleu", "--bootstrap", "0", "--json", ref, hyp]
    capsys.readouterr()
    assert run_cli([*args, "--src", raw, "--bucket-plot", plot]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {raw}: the source is Japanese or Chinese without spaces")
    assert len(err.strip().splitlines()) == 1 and not plot.exists()
    assert run_cli([*args, "--src", tokenized]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [b["sentences"] for b in records[1]["buckets"]] == [2, 0, 1, 0, 0]


# ---------------------------------------------------------------------------------------------
# export: an export of an average says which updates it averaged

def test_an_export_of_an_average_names_the_updates_it_averaged(tiny_bpe, tmp_path, capsys):
    """An average has no step of its own: its export recorded ``step: null`` and said
    ``step None``, so a shipped model could not be traced to the checkpoints it is."""
    pytest.importorskip("ctranslate2", reason="CTranslate2 is an optional extra")
    model, out = tmp_path / "m", tmp_path / "ct2"
    assert run_cli(["train", "-i", tiny_bpe, "-o", model, *TINY_MODEL, "--max-steps", "6",
                    "--valid-every", "3", "--keep-last", "2"]) == 0
    assert run_cli(["average", "-m", model, "--last", "2", "-o", "avg"]) == 0
    capsys.readouterr()
    assert run_cli(["export", "-m", model, "-c", model / "checkpoints" / "avg.pt",
                    "-o", out]) == 0
    assert "(avg.pt, the average of updates 3, 6, positions abs)" in capsys.readouterr().err
    record = json.loads((out / "depnmt-export.json").read_text(encoding="utf-8"))
    assert record["checkpoint"] == "avg.pt" and record["averaged_steps"] == [3, 6]
    assert "(avg.pt, the average of updates 3, 6; scheme" in \
        (out / "README.md").read_text(encoding="utf-8").replace("\n", " ")

"""``depnmt multitask`` end to end on the tiny corpus: the mixed corpus from the parse stage's
trees, then bpe, a few training updates and translation of the tagged test source."""

from __future__ import annotations

import json

from depnmt.core.conllu import read_conllu
from depnmt.stages.multitask import TAGS, linearize

from .conftest import TINY_MODEL, import_random_trees, run_cli, run_subprocess


def test_multitask_corpus_trains_and_translates(tiny_bpe, tmp_path, capsys):
    prepare = tiny_bpe.parent / "prepare"
    trees = import_random_trees(tiny_bpe, tmp_path / "given", "parse-multitask", ("en",),
                                ["nsubj", "obj", "det", "amod"], seed=11)
    out = tmp_path / "multitask"
    assert run_cli(["multitask", "-i", prepare, "-t", trees, "-o", out]) == 0
    src = (out / "train.en").read_text(encoding="utf-8").splitlines()
    tgt = (out / "train.de").read_text(encoding="utf-8").splitlines()
    original = (prepare / "train.en").read_text(encoding="utf-8").splitlines()
    assert len(src) == len(tgt) == 2 * len(original) == 800
    assert src[0] == f"{TAGS['translate']} {original[0]}"
    assert tgt[0] == (prepare / "train.de").read_text(encoding="utf-8").splitlines()[0]
    first = next(read_conllu(trees / "train.en.conllu"))
    assert src[400] == f"{TAGS['parse']} {original[0]}"
    assert tgt[400] == " ".join(linearize(first.words, first.heads, first.deprels))
    assert tgt[400].startswith("(root ") and tgt[400].count("(") == len(first.words)
    test_src = (out / "test.raw.en").read_text(encoding="utf-8").splitlines()
    assert len(test_src) == 30 and all(line.startswith(TAGS["translate"] + " ")
                                       for line in test_src)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["counts"]["train"] == {"translate": 400, "parse": 400}
    assert manifest["stage"] == "prepare" and manifest["src_lang"] == "en"

    bpe, model = tmp_path / "bpe", tmp_path / "model"
    assert run_cli(["bpe", "-i", out, "-o", bpe, "--merges", "300", "--joint"]) == 0
    vocab = (bpe / "vocab.src.txt").read_text(encoding="utf-8").split()
    assert TAGS["translate"] in vocab and TAGS["parse"] in vocab     # one token each
    assert run_cli(["train", "-i", bpe, "-o", model, *TINY_MODEL, "--max-steps", "3",
                    "--valid-every", "3"]) == 0
    result = run_subprocess(["translate", "-m", model, "--beam", "1", "-i",
                             out / "test.raw.en"])
    assert result.returncode == 0, result.stderr[-2000:]
    assert len(result.stdout.splitlines()) == 30

    half = tmp_path / "half"
    assert run_cli(["multitask", "-i", prepare, "-t", trees, "-o", half,
                    "--parse-fraction", "0.5"]) == 0
    assert json.loads((half / "manifest.json").read_text())["counts"]["train"]["parse"] == 200


def test_multitask_needs_the_source_trees(tiny_bpe, tmp_path, capsys):
    prepare = tiny_bpe.parent / "prepare"
    (tmp_path / "empty").mkdir()
    assert run_cli(["multitask", "-i", prepare, "-t", tmp_path / "empty", "-o",
                    tmp_path / "o"]) == 2
    err = capsys.readouterr().err
    assert "train.en.conllu: missing" in err and "Traceback" not in err
    # another stage's folder (the prepare folder given twice) is named as such
    assert run_cli(["multitask", "-i", prepare, "-t", prepare, "-o", tmp_path / "o"]) == 2
    assert f"{prepare}/manifest.json: written by stage 'prepare', expected 'parse' output " \
        "here" in capsys.readouterr().err
    # trees of other sentences: the first mismatching tree is named with its line
    (tmp_path / "other").mkdir()
    from depnmt.stages.parse import Sentence, write_conllu
    write_conllu(tmp_path / "other" / "train.en.conllu",
                 [Sentence(["Not", "these", "words"], [0, 1, 1], ["root", "dep", "dep"])])
    assert run_cli(["multitask", "-i", prepare, "-t", tmp_path / "other", "-o",
                    tmp_path / "o2"]) == 2
    err = capsys.readouterr().err
    assert "train.en.conllu:1: tree 1 has words ['Not', 'these', 'words']" in err
    assert f"but {prepare}/train.en:1 has" in err       # the text's file and line, not an index

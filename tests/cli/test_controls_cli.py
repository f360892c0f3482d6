"""``depnmt controls``: a parse folder of control trees, its manifest and guarantees, and a
model trained on it getting the same control's trees from ``translate``."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from depnmt.core.conllu import tree_problem
from depnmt.stages.parse import make_parser, read_conllu
from depnmt.stages.parse.controls import Control, is_projective

from .conftest import TINY_MODEL, import_random_trees, run_cli

LABELS = ["nsubj", "obj", "det", "amod"]


def trees(path: Path) -> list:
    return list(read_conllu(path))


def files(folder: Path) -> dict[str, bytes]:
    """The tree files of a folder and their bytes."""
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.conllu"))}


@pytest.fixture(scope="module")
def given(tiny_bpe, tmp_path_factory) -> Path:
    """A parse folder of both sides (random trees imported with the conllu backend)."""
    return import_random_trees(tiny_bpe, tmp_path_factory.mktemp("given"), "parse-both",
                               ("en", "de"), LABELS, seed=3)


def controls(parse: Path, out: Path, *args) -> int:
    return run_cli(["controls", "-i", parse, "-o", out, *args])


def test_control_folder_trees_and_manifest(given, tmp_path):
    out = tmp_path / "ctl"
    assert controls(given, out, "--kind", "random-projective", "--labels", "constant") == 0
    assert set(files(out)) == set(files(given)) and len(files(out)) == 6
    for name in files(given):
        for gold, tree in zip(trees(given / name), trees(out / name), strict=True):
            assert tree.words == gold.words and tree_problem(tree.heads) is None
            assert is_projective(tree.heads)
            assert tree.deprels == ["root" if h == 0 else "dep" for h in tree.heads]
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    control = {"kind": "random-projective", "seed": 1, "labels": "constant", "noise": None,
               "label_rule": "ud"}
    source = json.loads((given / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["stage"] == "parse" and manifest["inputs"]["parse"] == str(given.resolve())
    assert manifest["control"]["settings"] == control
    assert manifest["control"]["sides"] == ["src", "tgt"]
    for side in ("src", "tgt"):
        assert manifest["parser"][side] == {**source["parser"][side], "control": control}
    record = manifest["control"]["source"]
    digests = {name: hashlib.sha256((given / name).read_bytes()).hexdigest()
               for name in [*files(given), "manifest.json"]}
    assert record["files"] == digests
    joined = "".join(f"{name} {digests[name]}\n" for name in sorted(digests))
    assert record["sha256"] == hashlib.sha256(joined.encode()).hexdigest()


def test_the_same_seed_gives_the_same_folder(given, tmp_path):
    for name, seed in (("a", "5"), ("b", "5"), ("c", "6")):
        assert controls(given, tmp_path / name, "--kind", "noise", "--noise", "0.3",
                        "--seed", seed) == 0
    assert files(tmp_path / "a") == files(tmp_path / "b")
    assert all(files(tmp_path / "a")[n] != files(tmp_path / "c")[n] for n in files(given))
    assert all(files(tmp_path / "a")[n] != files(given)[n] for n in files(given))


def test_one_side_controlled_the_other_copied(given, tmp_path):
    out = tmp_path / "src-only"
    assert controls(given, out, "--kind", "left-branching", "--side", "src") == 0
    assert files(out)["test.de.conllu"] == files(given)["test.de.conllu"]
    assert all(t.heads == [*range(2, len(t) + 1), 0] for t in trees(out / "test.en.conllu"))
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert "control" in manifest["parser"]["src"] and "control" not in manifest["parser"]["tgt"]


@pytest.mark.parametrize("labels", ["keep", "shuffle", "constant"])
def test_control_trees_have_one_root_label_on_the_root(given, tmp_path, labels):
    """Whatever --labels says, `root` is on the HEAD-0 word and on no other: the old root's
    word gets `dep` (keep), the parser's other labels are dealt out (shuffle)."""
    out = tmp_path / labels
    assert controls(given, out, "--kind", "random-nonprojective", "--labels", labels) == 0
    moved = 0
    for name in files(given):
        for gold, tree in zip(trees(given / name), trees(out / name), strict=True):
            assert [i for i, d in enumerate(tree.deprels) if d == "root"] == \
                [i for i, h in enumerate(tree.heads) if h == 0]
            old_root = gold.heads.index(0) if len(gold) else None
            if labels == "keep" and old_root is not None and tree.heads[old_root] != 0:
                assert tree.deprels[old_root] == "dep"
                moved += 1
            if labels == "shuffle":
                assert sorted(tree.deprels) == sorted(gold.deprels)
    assert labels != "keep" or moved > 100


@pytest.mark.parametrize("where, message", [
    ("same", "must differ from the input parse folder"),
    ("inside", "lies inside the input parse folder"),
    ("around", "holds the input parse folder"),
])
def test_output_folder_around_the_input_is_refused(given, tmp_path, capsys, where, message):
    out = {"same": given, "inside": given / "ctl", "around": given.parent}[where]
    before = files(given)
    assert controls(given, out, "--kind", "shuffled") == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and err.startswith("error: ")
    assert files(given) == before and not (given / "ctl").exists()


def test_controls_of_controls_and_replacing_a_parser_folder_are_refused(given, tmp_path, capsys):
    ctl = tmp_path / "ctl"
    assert controls(given, ctl, "--kind", "shuffled") == 0
    capsys.readouterr()
    assert controls(ctl, tmp_path / "ctl2", "--kind", "shuffled") == 2
    assert "holds control trees already" in capsys.readouterr().err
    other = tmp_path / "real"
    other.mkdir()
    (other / "manifest.json").write_text(json.dumps({"stage": "parse", "outputs": {}}))
    assert controls(given, other, "--kind", "shuffled") == 2
    assert "holds a parser's trees" in capsys.readouterr().err
    assert controls(given, ctl, "--kind", "right-branching") == 0     # a control folder: replaced


def test_noise_needs_its_fraction(given, tmp_path, capsys):
    assert controls(given, tmp_path / "x", "--kind", "noise") == 2
    assert controls(given, tmp_path / "x", "--kind", "shuffled", "--noise", "0.2") == 2
    assert controls(given, tmp_path / "x", "--kind", "noise", "--noise", "0") == 2
    assert not (tmp_path / "x").exists()


def test_a_bad_input_tree_is_one_error_line_and_no_output(given, tmp_path, capsys):
    import shutil
    broken = tmp_path / "broken"
    shutil.copytree(given, broken)
    path = broken / "dev.en.conllu"
    lines = path.read_text(encoding="utf-8").split("\n")
    row = next(i for i, line in enumerate(lines) if line.startswith("1\t"))
    cols = lines[row].split("\t")
    cols[6] = "1"                                   # word 1 heads itself: a cycle
    lines[row] = "\t".join(cols)
    path.write_text("\n".join(lines), encoding="utf-8")
    assert controls(broken, tmp_path / "out", "--kind", "shuffled") == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and errors[0].startswith(f"error: {path}:{row + 1}: ")
    assert "cycle" in errors[0] and err.endswith(errors[0] + "\n") and "Traceback" not in err
    assert not (tmp_path / "out").exists()
    assert not list(tmp_path.glob(".out.*tmp*"))


# ---------------------------------------------------------------------------------------------
# A model trained on control trees: translate gives it the same control's trees

@pytest.fixture(scope="module")
def spacy_parse(tiny_bpe) -> Path:
    """spaCy's English source trees of the tiny corpus."""
    out = tiny_bpe.parent / "parse-spacy"
    if not out.exists():
        assert run_cli(["parse", "-i", tiny_bpe.parent / "prepare", "-o", out, "--side", "src",
                        "--backend", "spacy"]) == 0
    return out


def test_a_model_trained_on_controls_translates_with_them(tiny_bpe, spacy_parse, tmp_path,
                                                          capsys):
    from depnmt.decoding.translate import Translator
    ctl = tmp_path / "ctl"
    assert controls(spacy_parse, ctl, "--kind", "random-nonprojective", "--seed", "7",
                    "--labels", "shuffle") == 0
    assert run_cli(["bpe", "-i", tiny_bpe.parent / "prepare", "-o", tmp_path / "bpe",
                    "--merges", "300"]) == 0
    model = tmp_path / "model"
    assert run_cli(["train", "-i", tmp_path / "bpe", "-t", ctl, "-o", model, *TINY_MODEL,
                    "--scheme", "abs+dep+rel", "--max-steps", "3"]) == 0
    config = json.loads((model / "config.json").read_text(encoding="utf-8"))
    control = Control("random-nonprojective", 7, "shuffle")
    assert config["parser"]["src"]["control"] == control.to_dict()

    parsed = trees(spacy_parse / "test.en.conllu")
    wanted = trees(ctl / "test.en.conllu")
    translator = Translator.from_model_dir(model, device="cpu")
    words = [t.words for t in parsed if t.words]
    from_text = [ex.src_tree for ex in translator.examples(words)]        # parsed here
    from_trees = [ex.src_tree for ex in translator.examples(words, [t for t in parsed if t.words])]
    wanted = [t for t in wanted if t.words]
    assert from_text == wanted and from_trees == wanted     # the folder's very trees
    real = make_parser({k: v for k, v in config["parser"]["src"].items() if k != "control"})
    assert sum(a.heads != b.heads for a, b in zip(real.parse(words), from_text)) > 0.9 * len(words)

    capsys.readouterr()
    assert run_cli(["translate", "-m", model, "--input-format", "conllu", "-i",
                    spacy_parse / "test.en.conllu", "-o", tmp_path / "hyp.de"]) == 0
    assert len((tmp_path / "hyp.de").read_text(encoding="utf-8").splitlines()) == len(parsed)
    # forced scores: the parser's trees given (the control applied to them) or parsed here
    prepare = tiny_bpe.parent / "prepare"
    for name, fmt, src in (("given", "conllu", spacy_parse / "test.en.conllu"),
                           ("parsed", "text", prepare / "test.raw.en")):
        assert run_cli(["rescore", "-m", model, "--src-format", fmt, "--src", src,
                        "--tgt", prepare / "test.raw.de", "-o", tmp_path / f"{name}.tsv"]) == 0
    scores = (tmp_path / "given.tsv").read_text(encoding="utf-8")
    assert scores == (tmp_path / "parsed.tsv").read_text(encoding="utf-8")
    assert len(scores.splitlines()) == len(parsed)


def test_multitask_reads_a_control_folder_as_a_parse_folder(given, tiny_bpe, tmp_path):
    ctl = tmp_path / "ctl"
    assert controls(given, ctl, "--kind", "right-branching", "--labels", "constant") == 0
    out = tmp_path / "multitask"
    assert run_cli(["multitask", "-i", tiny_bpe.parent / "prepare", "-t", ctl, "-o", out]) == 0
    train = (out / "train.de").read_text(encoding="utf-8").splitlines()
    parses = [line for line in train if line.startswith("(root ")]
    assert len(parses) == 400                      # a chain: every word one level deeper
    assert all(line.count("(dep ") == line.count("(") - 1 for line in parses)


def test_a_parse_folder_without_its_prepare_folder_is_one_error_line(given, tmp_path, capsys):
    import shutil
    moved = tmp_path / "parse"
    shutil.copytree(given, moved)
    manifest = json.loads((moved / "manifest.json").read_text(encoding="utf-8"))
    manifest["prepare_dir"] = str(tmp_path / "gone")
    (moved / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    assert controls(moved, tmp_path / "out", "--kind", "shuffled") == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {moved}: its prepare folder") and str(tmp_path / "gone") in err
    assert err.count("\n") == 1 and not (tmp_path / "out").exists()

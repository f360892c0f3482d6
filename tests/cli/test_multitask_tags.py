"""A model trained on ``depnmt multitask`` data records its task tags in ``config.json``, and
everything that gives it source text (translate from a file or stdin, rescore, contrastive, the
Python API) refuses a source line that does not begin with one: the model only ever saw tagged
sources, so an untagged line would be decoded (or scored) silently as an input it was not
trained for."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import depnmt
from depnmt.core.errors import InputError
from depnmt.stages.multitask import TAGS

from .conftest import TINY_MODEL, import_random_trees, run_cli, run_subprocess

TAGGED = f"{TAGS['translate']} A dog runs ."
REFUSED = "does not begin with a task tag (xxtranslatexx or xxparsexx)"
ADVICE = "prefix the line with 'xxtranslatexx ' to translate it"


@pytest.fixture(scope="module")
def multitask_model(tiny_bpe, tmp_path_factory) -> Path:
    """A tiny model trained for 3 updates on the tiny corpus's multitask data."""
    root = tmp_path_factory.mktemp("multitask-tags")
    trees = import_random_trees(tiny_bpe, root / "given", "parse-multitask-tags", ("en",),
                                ["nsubj", "obj", "det"], seed=5)
    mixed, bpe, model = root / "multitask", root / "bpe", root / "model"
    assert run_cli(["multitask", "-i", tiny_bpe.parent / "prepare", "-t", trees,
                    "-o", mixed]) == 0
    assert run_cli(["bpe", "-i", mixed, "-o", bpe, "--merges", "300"]) == 0
    assert run_cli(["train", "-i", bpe, "-o", model, *TINY_MODEL, "--max-steps", "3",
                    "--valid-every", "0"]) == 0
    return model


def one_error_line(err: str, where: str) -> str:
    """The single line of ``err``, which must be the tag error naming ``where``."""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err[-2000:]
    assert lines[0].startswith(f"error: {where}: {REFUSED}") and ADVICE in lines[0], lines[0]
    return lines[0]


def test_train_records_the_task_tags(multitask_model, tiny_model):
    config = json.loads((multitask_model / "config.json").read_text(encoding="utf-8"))
    assert config["multitask"] == {"tags": TAGS}
    plain = json.loads((tiny_model / "config.json").read_text(encoding="utf-8"))
    assert "multitask" not in plain       # nothing recorded for a model of other data


def test_translate_refuses_an_untagged_line_of_a_file(multitask_model, tmp_path, capsys):
    given = tmp_path / "in.txt"
    given.write_text(f"{TAGGED}\n\nA dog runs .\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    assert run_cli(["translate", "-m", multitask_model, "-i", given, "-o", out,
                    "--beam", "1"]) == 2
    captured = capsys.readouterr()
    line = one_error_line(captured.err, f"{given}:3")          # the empty line 2 passes
    assert "test.raw.en" in line
    assert not out.exists() and captured.out == ""
    assert run_cli(["translate", "-m", multitask_model, "-i", given, "--beam", "1"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""                                  # nothing written before it
    one_error_line(captured.err, f"{given}:3")
    tagged = multitask_model.parent / "multitask" / "test.raw.en"      # the folder's own
    assert run_cli(["translate", "-m", multitask_model, "-i", tagged, "-o", out,
                    "--beam", "1"]) == 0
    assert len(out.read_text(encoding="utf-8").splitlines()) == 30


def test_translate_refuses_untagged_stdin(multitask_model):
    result = run_subprocess(["translate", "-m", multitask_model, "--beam", "1"],
                            input="A dog runs .\n")
    assert result.returncode == 2 and result.stdout == ""
    one_error_line(result.stderr, "<stdin>:1")


def test_api_refuses_an_untagged_sentence(multitask_model):
    translator = depnmt.Translator.load(multitask_model, device="cpu")
    with pytest.raises(InputError) as caught:
        translator.translate([TAGGED, "A dog runs ."], beam=1)
    assert str(caught.value).startswith(f"<input>:2: {REFUSED}") and ADVICE in str(caught.value)
    # either task's tag is fine; an empty sentence stays empty, as for any model
    results = translator.translate([TAGGED, "", f"{TAGS['parse']} A dog runs ."], beam=1)
    assert len(results) == 3 and results[1] == ""


def test_rescore_refuses_an_untagged_source(multitask_model, tmp_path, capsys):
    src, tgt, out = tmp_path / "src.txt", tmp_path / "tgt.txt", tmp_path / "scores.txt"
    src.write_text(f"{TAGGED}\nA dog runs .\n", encoding="utf-8")
    tgt.write_text("Ein Hund läuft .\nEin Hund läuft .\n", encoding="utf-8")
    assert run_cli(["rescore", "-m", multitask_model, "--src", src, "--tgt", tgt,
                    "-o", out]) == 2
    one_error_line(capsys.readouterr().err, f"{src}:2")
    assert not out.exists()
    src.write_text(f"{TAGGED}\n{TAGGED}\n", encoding="utf-8")
    assert run_cli(["rescore", "-m", multitask_model, "--src", src, "--tgt", tgt,
                    "-o", out]) == 0
    assert len(out.read_text(encoding="utf-8").splitlines()) == 2


def test_contrastive_refuses_an_untagged_item(multitask_model, tmp_path, capsys):
    items = tmp_path / "set.tsv"
    items.write_text(f"{TAGGED}\tEin Hund läuft .\tEin Hund laufen .\n"
                     f"A dog runs .\tEin Hund läuft .\tEin Hunde läuft .\n", encoding="utf-8")
    assert run_cli(["contrastive", "-m", multitask_model, items]) == 2
    one_error_line(capsys.readouterr().err, f"{items}:2")


def test_models_without_the_record_take_untagged_input(multitask_model, tiny_model, tmp_path,
                                                       capsys):
    """A model of other data, and a multitask model's folder of an earlier version (no record):
    untagged input translates as before."""
    older = tmp_path / "older"
    shutil.copytree(multitask_model, older)
    config = json.loads((older / "config.json").read_text(encoding="utf-8"))
    assert config.pop("multitask") == {"tags": TAGS}
    (older / "config.json").write_text(json.dumps(config), encoding="utf-8")
    given = tmp_path / "in.txt"
    given.write_text("A dog runs .\nTwo men talk .\n", encoding="utf-8")
    for model in (tiny_model, older):
        out = tmp_path / f"{model.name}.txt"
        assert run_cli(["translate", "-m", model, "-i", given, "-o", out, "--beam", "1"]) == 0
        assert len(out.read_text(encoding="utf-8").splitlines()) == 2


def test_ct2_export_refuses_an_untagged_line(multitask_model, tmp_path, capsys):
    pytest.importorskip("ctranslate2",
                        reason="CTranslate2 is an optional extra (pip install depnmt[ct2])")
    exported = tmp_path / "ct2"
    assert run_cli(["export", "--format", "ctranslate2", "-m", multitask_model,
                    "-o", exported]) == 0
    assert json.loads((exported / "depnmt-export.json").read_text())["multitask"] == {
        "tags": TAGS}
    capsys.readouterr()
    given = tmp_path / "in.txt"
    given.write_text(f"{TAGGED}\nA dog runs .\n", encoding="utf-8")
    assert run_cli(["translate", "--ct2", exported, "-i", given, "--beam", "1"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    one_error_line(captured.err, f"{given}:2")
    given.write_text(f"{TAGGED}\n\n{TAGS['parse']} A dog runs .\n", encoding="utf-8")
    assert run_cli(["translate", "--ct2", exported, "-i", given, "--beam", "1"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3

"""Bad input, class "inputs never overwritten, outputs never outside their folder": every stage
refuses an output folder that is, holds or lies inside one of its inputs, with one line naming
both, exit status 2 and every input byte-identical; a language code that is no language code
(it becomes part of file names) is an error naming the option, and nothing is written."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from .conftest import run_cli
from .test_chaos import chaos

error_lines = chaos.error_lines


def observe(folder: Path) -> dict[str, bytes]:
    """Every file below ``folder`` by relative path, with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def raw_corpus(folder: Path, tiny_bpe: Path) -> list:
    """``prepare`` arguments over raw copies of the tiny corpus's train files in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for lang in ("en", "de"):
        shutil.copy(tiny_bpe.parent / f"train.{lang}", folder / f"train.{lang}")
    return ["prepare", "--src-lang", "en", "--tgt-lang", "de", "--dev-size", "20",
            "--test-size", "20", "--train-src", folder / "train.en",
            "--train-tgt", folder / "train.de"]


def test_prepare_into_the_folder_of_its_raw_files_is_refused(tiny_bpe, tmp_path, capsys):
    """``prepare --train-src D/train.en … -o D`` would replace the raw corpus with its
    tokenized split (same names)."""
    data = tmp_path / "D"
    args = raw_corpus(data, tiny_bpe)
    before = observe(data)
    assert run_cli([*args, "-o", data]) == 2
    assert error_lines(capsys.readouterr().err) == [
        f"error: {data}: the output folder holds the --train-src file ({data / 'train.en'}), "
        f"which writing it would delete; choose another output folder"]
    assert observe(data) == before


def test_prepare_beside_its_raw_files_is_fine(tiny_bpe, tmp_path):
    args = raw_corpus(tmp_path / "D", tiny_bpe)
    before = observe(tmp_path / "D")
    assert run_cli([*args, "-o", tmp_path / "D" / "prepare"]) == 0
    assert (tmp_path / "D" / "prepare" / "train.en").exists()
    after = observe(tmp_path / "D")                  # the raw files untouched beside the output
    assert {k: v for k, v in after.items() if "prepare" not in k} == before   # + its lock


@pytest.mark.parametrize("lang", ["x/../../y", "../en", "en/de", "e n", "en.", "--", "e"])
def test_a_language_code_that_is_a_path_is_refused(lang, tiny_bpe, tmp_path, capsys):
    args = raw_corpus(tmp_path / "D", tiny_bpe)
    args[args.index("--src-lang") + 1] = lang
    assert run_cli([*args, "-o", tmp_path / "out" / "p"]) == 2
    assert error_lines(capsys.readouterr().err) == [
        f"error: --src-lang {lang!r} is not a language code (letters, e.g. en, de, ja, "
        f"optionally a subtag: pt-BR); it becomes part of file names"]
    assert not (tmp_path / "out").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["D"]


@pytest.mark.parametrize("lang", ["en", "pt-BR", "zh_Hant", "yue"])
def test_language_codes_with_subtags_are_accepted(lang):
    from depnmt.stages.prepare import check_language_code
    check_language_code(lang, "--src-lang")


@pytest.mark.parametrize("stage", ["bpe", "parse"])
@pytest.mark.parametrize("where", ["inside", "around"])
def test_a_stage_writing_inside_or_around_its_input_is_refused(stage, where, tiny_bpe, tmp_path,
                                                               capsys):
    """Output inside the prepare folder would make it hold what it does not own (and a rerun of
    prepare would delete it); output around it would replace it."""
    prep = tmp_path / "work" / "prepare"
    shutil.copytree(tiny_bpe.parent / "prepare", prep)
    before = observe(tmp_path / "work")
    out = prep / "sub" if where == "inside" else tmp_path / "work"
    extra = ["--backend", "conllu", "--conllu-dir", tmp_path] if stage == "parse" else []
    assert run_cli([stage, "-i", prep, "-o", out, *extra]) == 2
    relation = ("lies inside the prepare folder" if where == "inside"
                else "holds the prepare folder")
    [line] = error_lines(capsys.readouterr().err)
    assert line.startswith(f"error: {out}: the output folder {relation} ({prep})")
    assert observe(tmp_path / "work") == before


def test_export_into_or_over_its_model_folder_is_refused(tiny_model, tmp_path, capsys):
    model = tmp_path / "m"
    shutil.copytree(tiny_model, model)
    before = observe(model)
    assert run_cli(["export", "-m", model, "-o", model, "--force"]) == 2
    assert error_lines(capsys.readouterr().err) == [
        f"error: {model}: the output folder must differ from the model folder"]
    assert run_cli(["export", "-m", model, "-o", model / "ct2"]) == 2
    [line] = error_lines(capsys.readouterr().err)
    assert line.startswith(f"error: {model / 'ct2'}: the output folder lies inside the model "
                           f"folder ({model})")
    assert observe(model) == before


@pytest.mark.parametrize("where", ["same", "inside"])
def test_train_into_or_inside_its_data_folder_is_refused(where, tiny_bpe, tmp_path, capsys):
    """``train -i BPE -o BPE`` turned the data folder into a model folder."""
    data = tmp_path / "bpe"
    shutil.copytree(tiny_bpe, data)
    before = observe(data)
    out = data if where == "same" else data / "model"
    assert run_cli(["train", "-i", data, "-o", out, "--max-steps", "1"]) == 2
    [line] = error_lines(capsys.readouterr().err)
    expected = ("the output folder must differ from the bpe folder (-i)" if where == "same"
                else f"the output folder lies inside the bpe folder (-i) ({data})")
    assert line.startswith(f"error: {out}: {expected}")
    assert observe(data) == before

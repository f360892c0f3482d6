"""Data stages that must not be silently stale: a bpe folder whose prepare folder was made
again since (dev BLEU was scored against the new folder's references, line by line, and
chose ``best.pt``; fewer lines ended the first validation in a traceback), and a recipe re-run
with another data setting into the same work folder (its finished stages were skipped, so the
runs were those of the old setting)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from depnmt.core.errors import InputError

from .conftest import TINY_MODEL, run_cli
from .test_recipes import REPO, fake_aspec, run_recipe


def prepare(raw: Path, out: Path, *flags, dev: str = "dev", test: str = "test") -> Path:
    """``depnmt prepare`` of the tiny corpus's files in ``raw`` (``dev``/``test``: which files
    are the dev and test sets) into ``out``."""
    assert run_cli(["prepare", "--src-lang", "en", "--tgt-lang", "de",
                    "--train-src", raw / "train.en", "--train-tgt", raw / "train.de",
                    "--dev-src", raw / f"{dev}.en", "--dev-tgt", raw / f"{dev}.de",
                    "--test-src", raw / f"{test}.en", "--test-tgt", raw / f"{test}.de",
                    *flags, "-o", out]) == 0
    return out


@pytest.fixture()
def own_data(tiny_bpe, tmp_path) -> tuple[Path, Path]:
    """A prepare folder and its bpe folder of the tiny corpus (the session's are shared)."""
    folder = prepare(tiny_bpe.parent, tmp_path / "prepare")
    assert run_cli(["bpe", "-i", folder, "-o", tmp_path / "bpe", "--merges", "300"]) == 0
    return folder, tmp_path / "bpe"


@pytest.mark.parametrize("remade", [{"dev": "test", "test": "dev"},       # same line counts
                                    {"flags": ["--lowercase"]}], ids=["swapped", "lowercased"])
def test_train_refuses_a_bpe_folder_whose_prepare_was_made_again(remade, own_data, tiny_bpe,
                                                                 tmp_path, capsys):
    folder, bpe = own_data
    prepare(tiny_bpe.parent, folder, *remade.get("flags", []), dev=remade.get("dev", "dev"),
            test=remade.get("test", "test"))
    capsys.readouterr()
    model = tmp_path / "m"
    assert run_cli(["train", "-i", bpe, "-o", model, *TINY_MODEL, "--max-steps", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {folder / 'dev.en'}:1: not the sentence of {bpe / 'dev.en'}:1")
    assert "dev BLEU would be scored against other references" in err
    assert f"run `depnmt bpe -i {folder}` again" in err
    assert len(err.strip().splitlines()) == 1 and not model.exists()
    from depnmt import train_model
    with pytest.raises(InputError, match="not the sentence of"):
        train_model({"input": str(bpe), "output": str(model), "max-steps": 2})


def test_train_refuses_a_dev_set_of_another_length(own_data, tiny_bpe, tmp_path, capsys):
    """Fewer dev lines once ended the first validation with an IndexError traceback."""
    folder, bpe = own_data
    raw = tmp_path / "raw"
    raw.mkdir()
    for name in ("train.en", "train.de", "test.en", "test.de", "dev.en", "dev.de"):
        lines = (tiny_bpe.parent / name).read_text(encoding="utf-8").splitlines(keepends=True)
        (raw / name).write_text("".join(lines[:10] if name.startswith("dev") else lines),
                                encoding="utf-8")
    prepare(raw, folder)
    capsys.readouterr()
    assert run_cli(["train", "-i", bpe, "-o", tmp_path / "m", *TINY_MODEL, "--max-steps", "2",
                    "--valid-every", "2"]) == 2
    err = capsys.readouterr().err
    assert f"error: {folder / 'dev.en'}: has 10 lines but {bpe / 'dev.en'} has 30;" in err
    assert "Traceback" not in err


def test_train_takes_a_bpe_folder_made_again_from_the_new_prepare(own_data, tiny_bpe, tmp_path):
    folder, bpe = own_data
    prepare(tiny_bpe.parent, folder, "--lowercase")
    assert run_cli(["bpe", "-i", folder, "-o", bpe, "--merges", "300"]) == 0
    assert run_cli(["train", "-i", bpe, "-o", tmp_path / "m", *TINY_MODEL,
                    "--max-steps", "2", "--valid-every", "2"]) == 0


def test_the_check_takes_word_mode_and_subword_escapes(tiny_bpe, tmp_path):
    """Word mode (no segmentation, an "@@" inside a word escaped) and BPE of a dev line with
    such a word are the prepare folder's text: the check refuses neither."""
    folder = prepare(tiny_bpe.parent, tmp_path / "prepare")
    dev = folder / "dev.en"
    lines = dev.read_text(encoding="utf-8").splitlines()
    lines[0] = "mail@@ host a@@@@b " + lines[0]
    dev.write_text("\n".join(lines) + "\n", encoding="utf-8")
    for mode in (["--mode", "word"], ["--merges", "300"]):
        bpe = tmp_path / f"bpe-{mode[1]}"
        assert run_cli(["bpe", "-i", folder, "-o", bpe, *mode]) == 0
        assert run_cli(["train", "-i", bpe, "-o", tmp_path / f"m-{mode[1]}", *TINY_MODEL,
                        "--max-steps", "1", "--valid-every", "1"]) == 0


def test_a_recipe_rerun_with_another_first_is_refused(tmp_path, shared_data):
    aspec = fake_aspec(tmp_path / "data", shared_data)
    work = tmp_path / "work"
    made = run_recipe([aspec, "--until", "extract"], {"DEPNMT_WORK": str(work), "FIRST": "45"},
                      tmp_path)
    assert made.returncode == 0, made.stderr[-2000:]
    again = run_recipe([aspec, "--until", "extract"], {"DEPNMT_WORK": str(work), "FIRST": "45"},
                       tmp_path)
    assert again.returncode == 0 and "stopped after extract" in again.stdout
    other = run_recipe([aspec, "--until", "extract"], {"DEPNMT_WORK": str(work), "FIRST": "50"},
                       tmp_path)
    assert other.returncode == 2 and "stopped after extract" not in other.stdout
    assert other.stderr.strip() == (f"error: {work / 'extract'} was made with first 45, not 50: "
                                    f"give another setting another work folder (DEPNMT_WORK), "
                                    f"or remove {work / 'extract'} and the folders made from it")
    assert len((work / "extract" / "train.en").read_text().splitlines()) == 45


def test_done_stage_compares_the_settings_a_manifest_records(tmp_path):
    """What the recipes check a stage's folder against: keys of its manifest's options,
    nested ones by dots; an option left out (None) is the empty setting."""
    folder = tmp_path / "control"
    folder.mkdir()
    (folder / "manifest.json").write_text(json.dumps({"options": {
        "max_pairs": None, "control": {"kind": "random", "seed": 1, "labels": "keep"}}}))
    script = f"""
        . {REPO}/recipes/lib/compare.sh
        done_stage {tmp_path / "none"} || echo "not done"
        done_stage {folder} && echo "done"
        done_stage {folder} max_pairs= control.seed=1 control.labels=keep && echo "same"
        done_stage {folder} control.seed=1 control.labels=random || echo "not reached"
        echo "not reached either"
    """
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=False)
    assert result.returncode == 2
    assert result.stdout.splitlines() == ["not done", "done", "same"]
    assert result.stderr.strip().startswith(f"error: {folder} was made with control.labels "
                                            f"keep, not random:")

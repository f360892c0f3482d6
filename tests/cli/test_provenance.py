"""A model folder records what it was trained on (``config.json``'s ``provenance``), and
``train --resume`` refuses other data before any work unless asked to continue on it
(``--resume-on-changed-data``, logged as a ``data_changed`` record that ``runs`` and ``report``
show); ``--resume`` takes the saved trees folder; a fresh ``train -o`` leaves a folder of the
user's files alone; a damaged ``metrics.jsonl`` is one error."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from depnmt.storage.checkpoint import load_checkpoint

from .conftest import TINY_MODEL, import_random_trees, run_cli

LABELS = ["nsubj", "obj", "det", "amod"]
TREE_RUN = [*TINY_MODEL, "--scheme", "abs+dep", "--valid-every", "2"]


def snapshot(*folders: Path) -> dict[str, bytes]:
    """Every file under ``folders`` and its bytes (the training lock left out: holding it
    writes the holder's PID into it)."""
    return {str(p): p.read_bytes() for folder in folders for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != ".lock"}


def records(model: Path) -> list[dict]:
    return [json.loads(line) for line in (model / "metrics.jsonl").read_text().splitlines()]


def refused(args: list, capsys) -> str:
    """Run ``depnmt ARGS``, which must fail with one line (exit 2); returns the line."""
    capsys.readouterr()
    assert run_cli(args) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(err) == 1
    return err[0]


def step_of(model: Path) -> int:
    return load_checkpoint(model / "checkpoints" / "last.pt")["progress"]["step"]


@pytest.fixture(scope="module")
def parsed(tiny_bpe, tmp_path_factory) -> Path:
    """A parse folder of source trees (random trees imported with the conllu backend)."""
    return import_random_trees(tiny_bpe, tmp_path_factory.mktemp("given"), "parse-provenance",
                               ("en",), LABELS, seed=5)


@pytest.fixture(scope="module")
def tree_model(tiny_bpe, parsed, tmp_path_factory) -> Path:
    """abs+dep trained for 4 updates on the parser's trees of ``parsed``."""
    model = tmp_path_factory.mktemp("tree-model") / "m"
    assert run_cli(["train", "-i", tiny_bpe, "-t", parsed, "-o", model, *TREE_RUN,
                    "--max-steps", "4"]) == 0
    return model


@pytest.fixture()
def edited_bpe(tiny_bpe, tmp_path) -> Path:
    """A copy of the bpe folder whose training source has two lines swapped: the same line
    count, vocabulary and codes, other text."""
    out = tmp_path / "bpe-edited"
    shutil.copytree(tiny_bpe, out)
    lines = (out / "train.en").read_text(encoding="utf-8").splitlines(keepends=True)
    lines[0], lines[1] = lines[1], lines[0]
    (out / "train.en").write_text("".join(lines), encoding="utf-8")
    return out


def test_config_records_what_the_model_was_trained_on(tree_model, tiny_bpe, parsed):
    saved = json.loads((tree_model / "config.json").read_text())["provenance"]
    assert saved["text"]["folder"] == str(tiny_bpe.resolve())
    assert set(saved["text"]["files"]) == {"train.en", "train.de", "dev.en", "dev.de"}
    assert saved["references"]["files"].keys() == {"dev.raw.de"}
    trees = saved["trees"]
    assert trees["folder"] == str(parsed.resolve()) and trees["control"] is None
    assert set(trees["files"]) == {"train.en.conllu", "dev.en.conllu"}
    assert trees["lines"]["train.en.conllu"] > 400 and saved["init_from"] is None


def test_resume_on_control_trees_is_refused(tree_model, tiny_bpe, parsed, tmp_path, capsys):
    model, ctl = tmp_path / "m", tmp_path / "ctl"
    shutil.copytree(tree_model, model)
    assert run_cli(["controls", "-i", parsed, "-o", ctl, "--kind", "random-projective"]) == 0
    before = snapshot(model, tiny_bpe / "cache")
    line = refused(["train", "-i", tiny_bpe, "-o", model, "-t", ctl, "--resume",
                    "--max-steps", "6"], capsys)
    assert f"trained on trees {parsed.resolve()} (control: none)" in line
    assert f"-t {ctl.resolve()} is random-projective" in line
    assert "--resume-on-changed-data" in line
    assert snapshot(model, tiny_bpe / "cache") == before          # nothing written, no cache


def test_remade_control_folder_of_another_kind_is_refused(tiny_bpe, parsed, tmp_path, capsys):
    """Trained on a control folder that is then re-made (allowed) with another kind: --resume
    (without -t: the saved folder) refuses it."""
    model, ctl = tmp_path / "m", tmp_path / "ctl"
    assert run_cli(["controls", "-i", parsed, "-o", ctl, "--kind", "random-projective"]) == 0
    assert run_cli(["train", "-i", tiny_bpe, "-t", ctl, "-o", model, *TREE_RUN,
                    "--max-steps", "2"]) == 0
    assert run_cli(["controls", "-i", parsed, "-o", ctl, "--kind", "left-branching"]) == 0
    before = snapshot(model)
    line = refused(["train", "-i", tiny_bpe, "-o", model, "--resume", "--max-steps", "4"],
                   capsys)
    assert "(control: random-projective (seed 1, labels keep))" in line
    assert "is left-branching (seed 1, labels keep) trees" in line
    assert snapshot(model) == before


def test_resume_without_trees_takes_the_saved_folder(tree_model, tiny_bpe, tmp_path):
    model = tmp_path / "m"
    shutil.copytree(tree_model, model)
    assert run_cli(["train", "-i", tiny_bpe, "-o", model, "--resume", "--max-steps", "6"]) == 0
    assert step_of(model) == 6
    config = json.loads((model / "config.json").read_text())
    assert config["data"]["trees_dir"] == config["provenance"]["trees"]["folder"]


def test_resume_without_input_takes_the_saved_bpe_folder(tree_model, tmp_path, capsys):
    """Flags left out on --resume take the saved values, -i and -t included; a saved bpe
    folder that is gone is one error; a fresh run still needs -i."""
    model = tmp_path / "m"
    shutil.copytree(tree_model, model)
    assert run_cli(["train", "-o", model, "--resume", "--max-steps", "6"]) == 0
    assert step_of(model) == 6
    config = json.loads((model / "config.json").read_text())
    config["data"]["bpe_dir"] = str(tmp_path / "bpe-gone")
    (model / "config.json").write_text(json.dumps(config))
    line = refused(["train", "-o", model, "--resume", "--max-steps", "8"], capsys)
    assert f"{tmp_path / 'bpe-gone'}, which is gone; pass -i" in line
    capsys.readouterr()
    assert run_cli(["train", "-o", tmp_path / "fresh", *TINY_MODEL]) == 2
    assert "Missing option '-i' / '--input'" in capsys.readouterr().err
    assert not (tmp_path / "fresh").exists()


def test_resume_when_the_saved_trees_are_gone(tree_model, tiny_bpe, tmp_path, capsys):
    model = tmp_path / "m"
    shutil.copytree(tree_model, model)
    config = json.loads((model / "config.json").read_text())
    gone = tmp_path / "parse-gone"          # as if the parse folder had been deleted
    config["data"]["trees_dir"] = str(gone)
    (model / "config.json").write_text(json.dumps(config))
    line = refused(["train", "-i", tiny_bpe, "-o", model, "--resume", "--max-steps", "6"],
                   capsys)
    assert f"{gone}: no longer exists" in line and "pass -t" in line


def test_resume_on_edited_text_is_refused(tiny_model, edited_bpe, tmp_path, capsys):
    model = tmp_path / "m"
    shutil.copytree(tiny_model, model)
    before = snapshot(model, edited_bpe)
    line = refused(["train", "-i", edited_bpe, "-o", model, "--resume", "--max-steps", "14"],
                   capsys)
    assert f"{edited_bpe / 'train.en'} differs from the text the model was trained on" in line
    assert "train.de" not in line
    assert snapshot(model, edited_bpe) == before      # no cache built for the new text


def test_resume_on_another_input_of_the_same_vocabulary_is_refused(tiny_model, tiny_bpe,
                                                                   tmp_path, capsys):
    """Another bpe folder made with the model's codes and vocabularies (`bpe --subwords-from`)
    from other text (the corpus in reverse order): same vocabulary, other data."""
    root = tiny_bpe.parent
    for name in ("train.en", "train.de"):
        lines = (root / name).read_text(encoding="utf-8").splitlines(keepends=True)
        (tmp_path / name).write_text("".join(reversed(lines)), encoding="utf-8")
    assert run_cli(["prepare", "--src-lang", "en", "--tgt-lang", "de",
                    "--train-src", tmp_path / "train.en", "--train-tgt", tmp_path / "train.de",
                    "--dev-src", root / "dev.en", "--dev-tgt", root / "dev.de",
                    "--test-src", root / "test.en", "--test-tgt", root / "test.de",
                    "-o", tmp_path / "prepare"]) == 0
    other = tmp_path / "bpe"
    assert run_cli(["bpe", "-i", tmp_path / "prepare", "-o", other,
                    "--subwords-from", tiny_bpe]) == 0
    model = tmp_path / "m"
    shutil.copytree(tiny_model, model)
    before = snapshot(model)
    line = refused(["train", "-i", other, "-o", model, "--resume", "--max-steps", "14"], capsys)
    assert f"{other / 'train.en'} differs" in line and f"{other / 'train.de'} differs" in line
    assert snapshot(model) == before


def test_a_copy_of_the_same_data_resumes(tiny_model, tiny_bpe, tmp_path):
    """The data is identified by content: the same files in another folder are the same."""
    model, copy = tmp_path / "m", tmp_path / "bpe-copy"
    shutil.copytree(tiny_model, model)
    shutil.copytree(tiny_bpe, copy)
    assert run_cli(["train", "-i", copy, "-o", model, "--resume", "--max-steps", "14"]) == 0
    assert step_of(model) == 14
    assert not [r for r in records(model) if r["event"] == "data_changed"]


def test_resume_on_changed_data_continues_and_is_recorded(tiny_model, tiny_bpe, edited_bpe,
                                                          tmp_path, capsys):
    model = tmp_path / "camp" / "models" / "m"
    shutil.copytree(tiny_model, model)
    assert run_cli(["train", "-i", edited_bpe, "-o", model, "--resume",
                    "--resume-on-changed-data", "--max-steps", "14"]) == 0
    assert step_of(model) == 14
    changed = [r for r in records(model) if r["event"] == "data_changed"]
    assert len(changed) == 1 and list(changed[0]) == ["event", "step", "changed", "time"]
    assert changed[0]["step"] == 12 and changed[0]["time"] > 1.6e9
    [what] = changed[0]["changed"]
    assert what.startswith(f"{edited_bpe / 'train.en'} differs from the text the model was "
                           f"trained on (sha256 ")
    config = json.loads((model / "config.json").read_text())
    assert config["provenance"]["text"]["folder"] == str(edited_bpe.resolve())
    assert "resume-on-changed-data" not in (model / "train.yaml").read_text()
    # the model now records the new data: resuming on it again needs no flag, logs no event
    assert run_cli(["train", "-i", edited_bpe, "-o", model, "--resume", "--max-steps", "16"]) == 0
    assert [r for r in records(model) if r["event"] == "data_changed"] == changed
    # and on the old data it is a change again
    refused(["train", "-i", tiny_bpe, "-o", model, "--resume", "--max-steps", "18"], capsys)

    capsys.readouterr()
    assert run_cli(["runs", tmp_path / "camp", "--json"]) == 0
    state = json.loads(capsys.readouterr().out)
    assert state["data_changed"] == [{"step": 12, "changed": changed[0]["changed"]}]
    assert state["updates"] == 16
    # each --max-steps was another setting than the run had trained with
    assert state["settings_changed"] == [{"step": 12, "changed": ["--max-steps 12, not 14"]},
                                         {"step": 14, "changed": ["--max-steps 14, not 16"]}]
    assert run_cli(["runs", tmp_path / "camp"]) == 0
    assert ("| finished: update cap; data changed at update 12; settings changed at update "
            "12, 14 |") in capsys.readouterr().out


def test_report_notes_a_run_trained_on_changed_data(tiny_model, tiny_bpe, edited_bpe,
                                                    tmp_path, capsys):
    model = tmp_path / "m"
    shutil.copytree(tiny_model, model)
    assert run_cli(["train", "-i", edited_bpe, "-o", model, "--resume",
                    "--resume-on-changed-data", "--max-steps", "13"]) == 0
    ref = tiny_bpe.parent / "prepare" / "test.raw.de"
    capsys.readouterr()
    assert run_cli(["report", "--ref", ref, "--bootstrap", "0", "--shuffles", "0",
                    "-s", "tuned", model, ref]) == 0
    out = capsys.readouterr().out
    assert "Runs whose training data changed while they trained" in out
    assert f"- tuned, {model}: at update 12: {edited_bpe / 'train.en'} differs" in out
    assert "Runs whose settings changed while they trained" in out
    assert f"- tuned, {model}: at update 12: --max-steps 12, not 13" in out


def test_old_model_folders_resume_with_a_warning(tiny_model, tiny_bpe, tmp_path, capsys):
    model = tmp_path / "m"
    shutil.copytree(tiny_model, model)
    config = json.loads((model / "config.json").read_text())
    del config["provenance"]                    # as an earlier depnmt wrote it
    (model / "config.json").write_text(json.dumps(config))
    capsys.readouterr()
    assert run_cli(["train", "-i", tiny_bpe, "-o", model, "--resume", "--max-steps", "13"]) == 0
    assert "records no provenance of the data it was trained on" in capsys.readouterr().err
    assert "provenance" in json.loads((model / "config.json").read_text())


def test_changed_data_flag_needs_resume(tiny_bpe, tmp_path, capsys):
    capsys.readouterr()
    assert run_cli(["train", "-i", tiny_bpe, "-o", tmp_path / "m", *TINY_MODEL,
                    "--resume-on-changed-data"]) == 2
    assert "--resume-on-changed-data goes with --resume" in capsys.readouterr().err
    assert not (tmp_path / "m").exists()


def test_python_api_resume_checks_the_data(tiny_model, edited_bpe, tmp_path):
    from depnmt import train_model
    from depnmt.core.errors import DepnmtError
    model = tmp_path / "m"
    shutil.copytree(tiny_model, model)
    with pytest.raises(DepnmtError, match="differs from the text the model was trained on"):
        train_model({"input": str(edited_bpe), "output": str(model), "resume": True,
                     "max-steps": 14})
    train_model({"input": str(edited_bpe), "output": str(model), "resume": True,
                 "resume-on-changed-data": True, "max-steps": 14})
    assert step_of(model) == 14
    assert [r["step"] for r in records(model) if r["event"] == "data_changed"] == [12]


@pytest.mark.parametrize("files", [{"config.json": '{"lr": 0.1}\n', "notes.txt": "mine\n"},
                                   {"notes.txt": "mine\n"}])
def test_train_into_a_folder_of_other_files_is_refused(files, tiny_bpe, tmp_path, capsys):
    folder = tmp_path / "mine"
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(text)
    line = refused(["train", "-i", tiny_bpe, "-o", folder, *TINY_MODEL, "--max-steps", "1"],
                   capsys)
    assert f"{folder}: holds files that are not a depnmt model's" in line
    assert "notes.txt" in line
    assert sorted(p.name for p in folder.iterdir()) == sorted(files)       # not even a lock
    assert all((folder / name).read_text() == text for name, text in files.items())


def test_a_killed_runs_folder_is_trained_into(tiny_model, tiny_bpe, tmp_path):
    """A run killed before its first last.pt left config.json, vocabularies, a log and best.pt:
    a fresh run replaces them."""
    model = tmp_path / "m"
    shutil.copytree(tiny_model, model)
    (model / "checkpoints" / "last.pt").unlink()
    (model / "manifest.json").unlink()
    assert run_cli(["train", "-i", tiny_bpe, "-o", model, *TINY_MODEL, "--max-steps", "2"]) == 0
    assert step_of(model) == 2 and records(model)[0]["event"] == "start"


def test_metrics_log_that_is_not_utf8_is_one_error(tiny_model, tiny_bpe, tmp_path, capsys):
    model = tmp_path / "m"
    shutil.copytree(tiny_model, model)
    log = model / "metrics.jsonl"
    lines = log.read_bytes().split(b"\n")
    lines[1] = lines[1].replace(b'"event"', b'"ev\xffent"')
    log.write_bytes(b"\n".join(lines))
    before = snapshot(model)
    line = refused(["train", "-i", tiny_bpe, "-o", model, "--resume", "--max-steps", "14"],
                   capsys)
    assert line.startswith(f"error: {log}:2: not valid UTF-8")
    assert snapshot(model) == before
    line = refused(["runs", tmp_path], capsys)
    assert line.startswith(f"error: {log}:2: not valid UTF-8")


def test_init_from_is_recorded_and_kept_on_resume(tiny_model, tiny_bpe, tmp_path):
    from depnmt.data.record import sha256
    model = tmp_path / "m"
    assert run_cli(["train", "-i", tiny_bpe, "-o", model, *TINY_MODEL, "--max-steps", "2",
                    "--init-from", tiny_model]) == 0
    source = json.loads((model / "config.json").read_text())["provenance"]["init_from"]
    best = tiny_model / "checkpoints" / "best.pt"
    assert source == {"folder": str(tiny_model.resolve()), "checkpoint": str(best.resolve()),
                      "sha256": sha256(best)}
    assert run_cli(["train", "-i", tiny_bpe, "-o", model, "--resume", "--max-steps", "3"]) == 0
    assert json.loads((model / "config.json").read_text())["provenance"]["init_from"] == source

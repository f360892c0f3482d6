"""Bad input, class "model folders that do not fit together": a model folder is checked as a
whole when it is loaded (its vocabularies and BPE codes against the checksums ``config.json``
records), and ``--resume`` refuses data whose vocabularies or codes differ from the model's in
content, not only in size; each is one line naming the file, exit status 2."""

from __future__ import annotations

import json
import shutil

import pytest

from .conftest import other_segmentation, run_cli
from .test_chaos import chaos

error_lines = chaos.error_lines


@pytest.fixture
def model(tiny_model, tmp_path):
    copy = tmp_path / "m"
    shutil.copytree(tiny_model, copy)
    return copy


def cut_short(path, keep: float = 0.25) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:int(len(data) * keep)])


def test_the_model_records_its_subword_files(model):
    files = json.loads((model / "config.json").read_text())["files"]
    assert {"vocab.src.txt", "vocab.tgt.txt", "codes.joint"} <= set(files)


@pytest.mark.parametrize("name", ["vocab.src.txt", "vocab.tgt.txt", "codes.joint"])
def test_translate_refuses_a_file_cut_short(name, model, tmp_path, capsys):
    source = tmp_path / "in.txt"
    source.write_text("a dog runs .\n", encoding="utf-8")
    cut_short(model / name)
    assert run_cli(["translate", "-m", model, "-i", source, "-o", tmp_path / "out"]) == 2
    [line] = error_lines(capsys.readouterr().err)
    assert line.startswith(f"error: {model / name}: not the file the model was trained with")
    assert not (tmp_path / "out").exists()


def test_export_refuses_a_missing_vocabulary(model, tmp_path, capsys):
    (model / "vocab.src.txt").unlink()
    assert run_cli(["export", "-m", model, "-o", tmp_path / "ct2"]) == 2
    assert error_lines(capsys.readouterr().err) == [
        f"error: {model / 'vocab.src.txt'}: missing (config.json lists it; the model needs it)"]


def test_a_model_folder_of_an_earlier_depnmt_loads_with_a_warning(model, tmp_path, capsys):
    config = json.loads((model / "config.json").read_text())
    del config["files"]
    (model / "config.json").write_text(json.dumps(config))
    source = tmp_path / "in.txt"
    source.write_text("a dog runs .\n", encoding="utf-8")
    assert run_cli(["translate", "-m", model, "-i", source, "-o", tmp_path / "out"]) == 0
    assert "records no checksums of its vocabularies and codes" in capsys.readouterr().err


def test_resume_refuses_codes_of_another_segmentation(model, tiny_bpe, tmp_path, capsys):
    """Same vocabulary sizes, other codes: the weights would be read with other subwords."""
    other = other_segmentation(tiny_bpe, tmp_path / "bpe")
    before = {p.name: p.read_bytes() for p in model.iterdir() if p.is_file()}
    assert run_cli(["train", "-i", other, "-o", model, "--resume", "--max-steps", "14"]) == 2
    assert error_lines(capsys.readouterr().err) == [
        f"error: {other / 'codes.joint'}: differs from the model's {model / 'codes.joint'}: "
        f"--resume needs the data the model was trained on (the same vocabularies and subword "
        f"codes)"]
    assert {p.name: p.read_bytes() for p in model.iterdir() if p.is_file()} == before


def test_resume_on_the_same_data_still_works(model, tiny_bpe):
    assert run_cli(["train", "-i", tiny_bpe, "-o", model, "--resume", "--max-steps", "13"]) == 0


@pytest.mark.parametrize("change", ["drop", "reshape"])
def test_a_checkpoint_without_a_parameter_is_an_error_naming_it(change, model, tmp_path,
                                                                capsys):
    """A checkpoint whose digest is valid but which lacks a weight, or has one of another
    shape (was a state_dict traceback)."""
    import torch

    from depnmt.storage.checkpoint import load_checkpoint, save_checkpoint
    best = model / "checkpoints" / "best.pt"
    state = load_checkpoint(best)
    if change == "drop":
        del state["model"]["src_embed.weight"]
    else:
        state["model"]["src_embed.weight"] = torch.zeros(3, 3)
    save_checkpoint(best, state)
    source = tmp_path / "in.txt"
    source.write_text("a dog runs .\n", encoding="utf-8")
    assert run_cli(["translate", "-m", model, "-i", source, "-o", tmp_path / "out"]) == 2
    [line] = error_lines(capsys.readouterr().err)
    expected = ("has no weights for src_embed.weight" if change == "drop"
                else "src_embed.weight is (3, 3), the model's is")
    assert line.startswith(f"error: {best}: {expected}")


def test_a_checkpoint_of_another_run_with_the_same_shapes_is_refused(model, tmp_path, capsys):
    """Every checkpoint records the sha256 of its run's vocabularies and codes. Another run
    whose vocabularies have this one's sizes (here: two target entries swapped, its config.json
    recording them) has weights of the same shapes: loading this run's checkpoint there would
    translate with the entries swapped under its weights, exit 0. It is one line instead."""
    from depnmt.data.record import sha256
    from depnmt.storage.checkpoint import load_checkpoint, save_checkpoint
    best = model / "checkpoints" / "best.pt"
    config = json.loads((model / "config.json").read_text())
    assert load_checkpoint(best)["files"] == config["files"]
    other = tmp_path / "other"
    shutil.copytree(model, other)
    lines = (other / "vocab.tgt.txt").read_text(encoding="utf-8").splitlines(keepends=True)
    lines[10], lines[11] = lines[11], lines[10]
    (other / "vocab.tgt.txt").write_text("".join(lines), encoding="utf-8")
    config["files"]["vocab.tgt.txt"] = sha256(other / "vocab.tgt.txt")
    (other / "config.json").write_text(json.dumps(config))
    source = tmp_path / "in.txt"
    source.write_text("a dog runs .\n", encoding="utf-8")
    for args in (["translate", "-i", source, "-o", tmp_path / "out"],
                 ["export", "-o", tmp_path / "ct2"]):
        capsys.readouterr()
        assert run_cli([*args, "-m", other, "--checkpoint", best]) == 2
        [line] = error_lines(capsys.readouterr().err)
        assert line.startswith(f"error: {best}: trained with another vocab.tgt.txt than the "
                               f"model folder's (sha256 ")
    assert not (tmp_path / "out").exists()
    assert run_cli(["translate", "-m", model, "--checkpoint", best, "-i", source,
                    "-o", tmp_path / "mine"]) == 0
    old = load_checkpoint(best)                   # saved by an earlier depnmt: no record
    del old["files"]
    save_checkpoint(tmp_path / "old.pt", old)
    assert run_cli(["translate", "-m", other, "--checkpoint", tmp_path / "old.pt", "-i", source,
                    "-o", tmp_path / "out"]) == 0

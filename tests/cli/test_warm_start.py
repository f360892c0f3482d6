"""``train --init-from MODEL``: a new run from a trained model's weights. Into abs+dep+rel from
a trained abs it copies every shared weight, names the new ones (the relative tables), and
starts from a lower dev loss than a fresh run; it refuses a model whose vocabularies or codes
are not the data's, and --resume beside it."""

from __future__ import annotations

import json

import pytest

from .conftest import (TINY_MODEL, import_random_trees, other_segmentation, run_cli,
                       train_tiny)
from .test_chaos import chaos

error_lines = chaos.error_lines


@pytest.fixture(scope="module")
def trained_abs(tiny_bpe, tmp_path_factory):
    """abs trained for 60 updates: its dev loss is well below a fresh model's."""
    return train_tiny(tiny_bpe, tmp_path_factory.mktemp("abs") / "abs", 60, 30)


@pytest.fixture(scope="module")
def trees(tiny_bpe, tmp_path_factory):
    return import_random_trees(tiny_bpe, tmp_path_factory.mktemp("given"), "parse-warm",
                               ("en",), ["nsubj", "obj", "det"], 3)


def first_dev_nll(model_dir) -> float:
    records = [json.loads(x) for x in (model_dir / "metrics.jsonl").read_text().splitlines()]
    return next(r["dev_nll"] for r in records if r.get("event") == "valid")


def one_update(tiny_bpe, trees, out, *extra) -> int:
    """abs+dep+rel, one update at a learning rate too small to move it, then validation."""
    return run_cli(["train", "-i", tiny_bpe, "-t", trees, "-o", out, *TINY_MODEL,
                    "--scheme", "abs+dep+rel", "--max-steps", "1", "--valid-every", "1",
                    "--lr", "1e-9", *extra])


def test_abs_into_abs_dep_rel_starts_lower_and_names_the_new_weights(trained_abs, tiny_bpe,
                                                                     trees, tmp_path, capsys):
    assert one_update(tiny_bpe, trees, tmp_path / "fresh") == 0
    capsys.readouterr()
    assert one_update(tiny_bpe, trees, tmp_path / "warm", "--init-from", trained_abs) == 0
    err = capsys.readouterr().err
    [line] = [x for x in err.splitlines() if "warm start from" in x]
    assert str(trained_abs / "checkpoints" / "best.pt") in line
    new = line.split("; new: ")[1].split(", ")
    assert new and all(name.startswith("schemes.") for name in new), new
    assert first_dev_nll(tmp_path / "warm") < first_dev_nll(tmp_path / "fresh") - 0.5


def test_a_checkpoint_file_can_be_given(trained_abs, tiny_bpe, tmp_path, capsys):
    last = trained_abs / "checkpoints" / "last.pt"
    assert run_cli(["train", "-i", tiny_bpe, "-o", tmp_path / "m", *TINY_MODEL, "--max-steps",
                    "1", "--init-from", last]) == 0
    assert f"warm start from {last}: " in capsys.readouterr().err


def test_other_codes_are_refused(trained_abs, tiny_bpe, tmp_path, capsys):
    other = other_segmentation(tiny_bpe, tmp_path / "bpe")
    assert run_cli(["train", "-i", other, "-o", tmp_path / "m", *TINY_MODEL, "--max-steps", "1",
                    "--init-from", trained_abs]) == 2
    assert error_lines(capsys.readouterr().err) == [
        f"error: {other / 'codes.joint'}: differs from the model's "
        f"{trained_abs / 'codes.joint'}: --init-from needs the data the model was trained on (the "
        f"same vocabularies and subword codes)"]


def test_init_from_and_resume_together_are_refused(trained_abs, tiny_model, tiny_bpe, capsys):
    assert run_cli(["train", "-i", tiny_bpe, "-o", tiny_model, "--resume", "--init-from",
                    trained_abs]) == 2
    assert "--init-from starts a new run from a trained model and --resume continues this " \
           "one: give one of them" in capsys.readouterr().err

"""The Python API applies the checks of the commands it stands for: an ensemble given a
checkpoint file (which would load one model's weights into every member) is refused by
depnmt.Translator.load as by translate and rescore, including a ``.pt`` name that is a file
of the working directory; ForcedScorer takes a checkpoint by name, as rescore --checkpoint
and Translator.load do."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import depnmt
from depnmt.core.errors import DepnmtError
from depnmt.decoding.forced import ForcedScorer

from .conftest import run_cli

NAME_NOT_FILE = "an ensemble takes a checkpoint name"


def sources(tiny_bpe: Path) -> list[str]:
    return (tiny_bpe.parent / "prepare" / "test.raw.en").read_text().splitlines()[:6]


@pytest.mark.parametrize("as_path", [True, False])
def test_api_ensemble_refuses_a_checkpoint_file(seeds, as_path):
    first, second = seeds
    best = first / "checkpoints" / "best.pt"
    with pytest.raises(DepnmtError, match=f"checkpoint={best}: {NAME_NOT_FILE}"):
        depnmt.Translator.load([first, second], checkpoint=best if as_path else str(best),
                               device="cpu")


def test_api_ensemble_takes_a_name_each_folder_has(seeds, tiny_bpe):
    named = depnmt.Translator.load(list(seeds), checkpoint="best", device="cpu")
    default = depnmt.Translator.load(list(seeds), device="cpu")
    assert named.translate(sources(tiny_bpe)) == default.translate(sources(tiny_bpe))


@pytest.mark.parametrize("command", ["translate", "rescore"])
def test_ensemble_refuses_a_pt_name_that_is_a_file_here(seeds, tiny_bpe, tmp_path, monkeypatch,
                                                        capsys, command):
    """``--checkpoint best.pt`` with a ``best.pt`` in the working directory names that file
    (:func:`~depnmt.storage.modeldir.checkpoint_file`): an ensemble refuses it, as a path."""
    first, second = seeds
    shutil.copy(first / "checkpoints" / "best.pt", tmp_path / "best.pt")
    monkeypatch.chdir(tmp_path)
    src = tmp_path / "in.txt"
    src.write_text("".join(line + "\n" for line in sources(tiny_bpe)), encoding="utf-8")
    inputs = ["-i", src] if command == "translate" else ["--src", src, "--tgt", src]
    capsys.readouterr()
    assert run_cli([command, "-m", first, "-m", second, "--checkpoint", "best.pt",
                    *inputs]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --checkpoint best.pt: {NAME_NOT_FILE}")
    assert "Traceback" not in err
    with pytest.raises(DepnmtError, match=f"checkpoint=best.pt: {NAME_NOT_FILE}"):
        depnmt.Translator.load([first, second], checkpoint="best.pt", device="cpu")


def test_forced_scorer_takes_a_checkpoint_name(seeds, tiny_bpe):
    first, second = seeds
    lines = sources(tiny_bpe)
    by_file = ForcedScorer.from_model_dir(first, checkpoint=first / "checkpoints" / "last.pt",
                                          device="cpu").score_lines(lines, lines)
    by_name = ForcedScorer.from_model_dir(first, checkpoint="last", device="cpu")
    assert by_name.score_lines(lines, lines) == by_file
    ensemble = ForcedScorer.from_model_dirs([first, second], ["last", "last"], device="cpu")
    assert ensemble.score_lines(lines, lines) != by_file
    with pytest.raises(DepnmtError, match=r"no checkpoint named 'step9' in .*\(there are: "
                                          r"best, last\)"):
        ForcedScorer.from_model_dir(first, checkpoint="step9", device="cpu")

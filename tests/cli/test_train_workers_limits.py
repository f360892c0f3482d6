"""``train --workers N``: N has an upper bound (64), checked with the other options before any
work, and a system that refuses to start the workers is one error line, not a hang or a
traceback."""

from __future__ import annotations

import multiprocessing.process

from .conftest import TINY_MODEL, run_cli


def test_too_many_workers_are_refused_before_any_work(tiny_bpe, tmp_path, capsys):
    for workers in ("65", "1000"):
        assert run_cli(["train", "-i", tiny_bpe, "-o", tmp_path / "m", *TINY_MODEL,
                        "--max-steps", "1", "--workers", workers]) == 2
        err = capsys.readouterr().err
        assert f"Invalid value for '--workers': {workers} is not in the range -1<=x<=64" in err
        assert "Traceback" not in err and not (tmp_path / "m").exists()


def test_workers_the_system_refuses_are_one_error(tiny_bpe, tmp_path, capsys, monkeypatch):
    def refused(self):
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", refused)
    assert run_cli(["train", "-i", tiny_bpe, "-o", tmp_path / "m", *TINY_MODEL,
                    "--max-steps", "2", "--workers", "2"]) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert errors == ["error: --workers 2: the system refused to start 2 data-loader processes "
                      "(Resource temporarily unavailable); give fewer, or --workers 0 to make "
                      "the batches in the training process"], err
    assert "Traceback" not in err

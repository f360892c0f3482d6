"""Progress of translate, rescore and contrastive: on a terminal, a bar of the lines (pairs)
done, their rate and, with the input's size known, the time left; elsewhere (a pipe, a file,
these tests' own captured stderr) nothing more than before, and the input is not counted."""

from __future__ import annotations

import io
import shutil
import sys
from pathlib import Path

import pytest
from rich.console import Console

import depnmt.core.log
import depnmt.core.textio

from .conftest import run_cli


@pytest.fixture
def terminal(monkeypatch) -> io.StringIO:
    """Standard error as a terminal for depnmt's messages (rich's console), progress bars
    enabled; what it draws."""
    screen = io.StringIO()
    monkeypatch.delenv("DEPNMT_NO_PROGRESS", raising=False)
    monkeypatch.setattr(depnmt.core.log, "console", Console(file=screen, force_terminal=True,
                                                       width=150, highlight=False))
    return screen


@pytest.fixture
def no_terminal(monkeypatch) -> list:
    """Progress bars enabled, standard error not a terminal; the files counted (none, here)."""
    counted: list = []
    for name in ("DEPNMT_NO_PROGRESS", "FORCE_COLOR", "TTY_COMPATIBLE"):
        monkeypatch.delenv(name, raising=False)
    count = depnmt.core.textio.count_lines
    monkeypatch.setattr(depnmt.core.textio, "count_lines", lambda p: counted.append(p) or count(p))
    return counted


def corpus(tiny_bpe: Path) -> tuple[Path, Path]:
    prepare = tiny_bpe.parent / "prepare"
    return prepare / "test.raw.en", prepare / "test.raw.de"


def contrastive_set(tiny_bpe: Path, path: Path) -> Path:
    """An item per test pair: the reference against its words reversed (30 items, 60 pairs)."""
    src, ref = (p.read_text(encoding="utf-8").splitlines() for p in corpus(tiny_bpe))
    path.write_text("".join(f"{s}\t{r}\t{' '.join(r.split()[::-1])}\n" for s, r in zip(src, ref)),
                    encoding="utf-8")
    return path


def commands(tiny_model: Path, tiny_bpe: Path, tmp_path: Path) -> dict[str, list]:
    src, ref = corpus(tiny_bpe)
    return {"translating": ["translate", "-m", tiny_model, "-i", src, "-o", tmp_path / "hyp"],
            "scoring": ["rescore", "-m", tiny_model, "--src", src, "--tgt", ref,
                        "-o", tmp_path / "scores"]}


@pytest.mark.parametrize("what", ["translating", "scoring"])
def test_a_terminal_shows_lines_done_rate_and_time_left(what, tiny_model, tiny_bpe, tmp_path,
                                                        terminal, capsys):
    assert run_cli(commands(tiny_model, tiny_bpe, tmp_path)[what]) == 0
    screen = terminal.getvalue()
    assert what in screen and "30/30" in screen and "lines/s" in screen, screen
    assert "0:00:00" in screen                      # elapsed, and the time left at the end
    assert capsys.readouterr().err == ""           # nothing else on standard error


def test_contrastive_counts_the_pairs_of_every_model(tiny_model, tiny_bpe, tmp_path, terminal,
                                                     capsys):
    """Two models (a model and a copy of it: one folder twice is refused), 60 pairs each: 120
    pairs scored."""
    tsv = contrastive_set(tiny_bpe, tmp_path / "set.tsv")
    copy = tmp_path / "copy"
    shutil.copytree(tiny_model, copy)
    capsys.readouterr()
    assert run_cli(["contrastive", "-m", tiny_model, "-m", copy, tsv]) == 0
    screen = terminal.getvalue()
    assert "scoring" in screen and "120/120" in screen and "lines/s" in screen, screen
    assert "| **all** |" in capsys.readouterr().out


def test_standard_input_has_no_total(tiny_model, tiny_bpe, tmp_path, terminal, monkeypatch):
    """Lines read from a pipe are not counted first: the bar shows how many are done."""
    src, _ = corpus(tiny_bpe)
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(src.read_bytes())))
    assert run_cli(["translate", "-m", tiny_model, "-o", tmp_path / "hyp"]) == 0
    screen = terminal.getvalue()
    assert "translating" in screen and "30/?" in screen and "lines/s" in screen, screen
    assert len((tmp_path / "hyp").read_text(encoding="utf-8").splitlines()) == 30


@pytest.mark.parametrize("what", ["translating", "scoring", "contrastive"])
def test_without_a_terminal_nothing_changes(what, tiny_model, tiny_bpe, tmp_path, no_terminal,
                                            capsys):
    """Standard error not a terminal: the same (empty) standard error as before, the same
    output as with progress bars off, and no input counted."""
    if what == "contrastive":
        args = ["contrastive", "-m", tiny_model, contrastive_set(tiny_bpe, tmp_path / "s.tsv")]
    else:
        args = commands(tiny_model, tiny_bpe, tmp_path)[what]
    capsys.readouterr()
    assert run_cli(args) == 0
    out, err = capsys.readouterr()
    assert err == "" and no_terminal == []
    if what == "contrastive":
        assert "| **all** |" in out


def test_the_output_stays_on_standard_output_under_the_bar(tiny_model, tiny_bpe, terminal,
                                                           capsys):
    """Standard output redirected (`> FILE`), standard error a terminal: the bar on stderr,
    every translation on stdout (rich would send what is written to stdout to stderr)."""
    src, _ = corpus(tiny_bpe)
    capsys.readouterr()
    assert run_cli(["translate", "-m", tiny_model, "-i", src]) == 0
    out = capsys.readouterr().out.splitlines()
    screen = terminal.getvalue()
    assert len(out) == 30 and "30/30" in screen
    assert not any(line and line in screen for line in out)


def test_no_bar_through_output_on_the_same_terminal(tiny_model, tiny_bpe, terminal,
                                                    monkeypatch, capsys):
    """Standard output a terminal too: the translations appearing there are the progress."""
    src, _ = corpus(tiny_bpe)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    assert run_cli(["translate", "-m", tiny_model, "-i", src]) == 0
    assert terminal.getvalue() == "" and len(capsys.readouterr().out.splitlines()) == 30

"""Chaos per stage, the short version of ``bench/chaos.py`` (whose functions it runs): a few
SIGKILLs at random moments, two writers, a full disk and a read-only output folder against
prepare, parse, bpe, train, average, export and report. Every outcome is the uninterrupted
run's output (timing fields aside, see the bench's docstring) or one ``error:`` line, never a
traceback, and a reader between a kill and the re-run sees a complete output, none, or a
clear error."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.scripts import load_script


def load_chaos():
    """``bench/chaos.py`` as a module (it is a script, not part of the package)."""
    return load_script("chaos")


chaos = load_chaos()
KILLS = {"prepare": 2, "parse": 2, "bpe": 2, "export": 1, "report": 1, "average": 1, "train": 1}
SLOW = {"average", "train", "export", "report"}     # > 10 s: they train a model first


@pytest.fixture(scope="module")
def work(tiny_bpe, tmp_path_factory) -> Path:
    """A corpus folder as the bench makes it: ``prepare`` and ``bpe`` of the tiny corpus."""
    work = tmp_path_factory.mktemp("chaos")
    (work / "prepare").symlink_to(tiny_bpe.parent / "prepare")
    (work / "bpe").symlink_to(tiny_bpe)
    return work


@pytest.mark.parametrize("stage", [pytest.param(name, marks=[pytest.mark.slow] * (name in SLOW))
                                   for name in chaos.STAGES])
def test_chaos(stage, work, tmp_path):
    if stage == "export":
        pytest.importorskip("ctranslate2")
    result = chaos.check_stage(chaos.STAGES[stage], work, KILLS[stage], 0, tmp_path)
    outcomes = result["outcomes"]
    assert result["failures"] == [], chaos.table(stage, result, KILLS[stage])
    assert outcomes["killed"] + outcomes["finished before the kill"] == KILLS[stage]
    assert outcomes["writer succeeded"] >= 1, outcomes
    refused = [k for k in outcomes if k.startswith(("full disk", "read-only"))]
    assert len(refused) == 2 and all(re.fullmatch(
        r"(full disk \((tmpfs|RLIMIT_FSIZE)\)|read-only): error: OUT\S*: cannot write: "
        r"(No space left on device|File too large|Permission denied)", k) for k in refused), refused


def test_a_mixed_folder_is_a_failure(work, tmp_path):
    """The checks catch what they look for: a reader accepting a folder mixing two runs."""
    stage = chaos.STAGES["bpe"]
    out = tmp_path / "out"
    ref = chaos.reference(stage, work, out)
    other = tmp_path / "other"
    assert chaos.run(["bpe", "-i", work / "prepare", "-o", other, "--merges", "200"]
                     ).returncode == 0
    (out / "train.en").write_bytes((other / "train.en").read_bytes())
    assert chaos.reader_verdict(stage, out, ref, None) == (
        "reader accepted an output that is neither the previous nor the complete one")


def test_timing_fields_are_all_that_is_ignored():
    """Two manifests differing in ``created`` compare equal; in anything else, not."""
    a = b'{"stage": "bpe", "created": "2026-01-01T00:00:00+00:00", "options": {"x": 1}}'
    b = b'{"stage": "bpe", "created": "2026-01-02T00:00:00+00:00", "options": {"x": 1}}'
    c = b'{"stage": "bpe", "created": "2026-01-01T00:00:00+00:00", "options": {"x": 2}}'
    norm = chaos.normalize
    assert norm("manifest.json", a) == norm("manifest.json", b) != norm("manifest.json", c)
    log = b'{"time": 1.0, "event": "train", "step": 2, "loss": 6.4, "load": 3.2}\n'
    assert norm("metrics.jsonl", log) == norm("metrics.jsonl", log.replace(b"1.0", b"9.5")
                                              .replace(b"3.2", b"0.1"))
    assert norm("metrics.jsonl", log) != norm("metrics.jsonl", log.replace(b"6.4", b"6.5"))


def test_observe_calls_a_folder_replaced_while_read_gone(tmp_path, monkeypatch):
    """A writer that renames the folder away and deletes its files while a reader lists it
    leaves the reader's handle on an emptied folder: not the stage's output (an empty or
    partial listing would look like a mixed folder), so ``observe`` says "gone"."""
    import os
    import shutil
    out = tmp_path / "out"
    out.mkdir()
    (out / "a.txt").write_text("a\n")
    assert chaos.observe(out) == {"a.txt": b"a\n"}
    listdir = os.listdir

    def replaced_meanwhile(fd):
        os.rename(out, tmp_path / ".out.old")
        shutil.rmtree(tmp_path / ".out.old")
        (tmp_path / "new").mkdir()
        os.rename(tmp_path / "new", out)
        return listdir(fd)

    monkeypatch.setattr(chaos.os, "listdir", replaced_meanwhile)
    assert chaos.observe(out) == "gone"

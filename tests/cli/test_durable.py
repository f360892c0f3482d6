"""Durable writes: what a command reports as written is on disk (``fsync``), the file's data and
the folder's entry for it, so a power cut right after cannot lose or undo it.

``os.fsync`` is wrapped to record, in order, the inode (and size) of everything flushed; a file
is durable when its final inode (the one its name points at after the rename) was flushed at
its final size, and its folder was flushed after that."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .conftest import TINY_MODEL, run_cli
from .test_archive import campaign


@pytest.fixture
def fsynced(monkeypatch) -> list[tuple[int, int]]:
    """``(inode, size)`` of every ``os.fsync`` from now on, in call order."""
    calls: list[tuple[int, int]] = []
    real = os.fsync

    def record(fd: int) -> None:
        real(fd)
        st = os.fstat(fd)
        calls.append((st.st_ino, st.st_size))

    monkeypatch.setattr(os, "fsync", record)
    return calls


def last_flush(path: Path, calls: list[tuple[int, int]]) -> int:
    """The index in ``calls`` of the last flush of file ``path`` as it is now."""
    st = path.stat()
    flushed = [i for i, (ino, size) in enumerate(calls) if ino == st.st_ino and size == st.st_size]
    assert flushed, f"{path} was not flushed to disk as it is now"
    return flushed[-1]


def assert_durable(path: Path, calls: list[tuple[int, int]]) -> None:
    """A file: ``path`` was flushed at its present size, and its folder after that (the
    rename). A folder: the folder it was created in was flushed."""
    folder = path.parent.stat().st_ino
    since = last_flush(path, calls) if path.is_file() else 0
    assert any(ino == folder for ino, _ in calls[since:]), \
        f"{path.parent} was not flushed after {path.name} was written"


def test_training_flushes_what_it_writes(tiny_bpe, tmp_path, fsynced):
    model = tmp_path / "m"
    assert run_cli(["train", "-i", tiny_bpe, "-o", model, *TINY_MODEL, "--max-steps", "2",
                    "--valid-every", "2"]) == 0
    for name in ("checkpoints/last.pt", "checkpoints/best.pt", "manifest.json", "config.json",
                 "train.yaml", "metrics.jsonl"):
        assert_durable(model / name, fsynced)
    assert_durable(model / "checkpoints", fsynced)          # the new folder's entry in MODEL_DIR


def test_archive_flushes_what_it_writes(tiny_model, tiny_bpe, tmp_path, fsynced):
    _, folders = campaign(tiny_model, tiny_bpe, tmp_path)
    out = tmp_path / "results"
    fsynced.clear()
    assert run_cli(["archive", *folders, "-o", out]) == 0
    files = [p for p in out.rglob("*") if p.is_file()]
    assert len(files) == 17                                  # 4 runs x 4 files + data.json
    for path in files + [p for p in out.rglob("*") if p.is_dir()]:
        assert_durable(path, fsynced)


def test_stage_manifest_is_flushed(tiny_bpe, tmp_path, fsynced):
    out = tmp_path / "bpe"
    assert run_cli(["bpe", "-i", tiny_bpe.parent / "prepare", "-o", out, "--mode", "word"]) == 0
    assert_durable(out / "manifest.json", fsynced)
    assert_durable(out, fsynced)


def test_append_line_flushes_each_line(tmp_path, fsynced):
    from depnmt.core.textio import append_line
    log = tmp_path / "new" / "metrics.jsonl"
    log.parent.mkdir()
    append_line(log, '{"step": 0}')
    assert_durable(log, fsynced)                            # the new file's entry too
    for n in (1, 2):
        append_line(log, f'{{"step": {n}}}')
        last_flush(log, fsynced)


def test_a_folder_that_cannot_be_flushed_is_skipped(tmp_path, monkeypatch):
    """A file system that cannot fsync folders (EINVAL) writes the file; failing to flush the
    file itself is an error naming it."""
    import errno

    from depnmt.core.errors import DepnmtError
    from depnmt.core.textio import atomic_open
    real = os.fsync

    def fsync(fd: int) -> None:
        if os.path.isdir(f"/proc/self/fd/{fd}") or fail_files:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        real(fd)

    fail_files = False
    monkeypatch.setattr(os, "fsync", fsync)
    with atomic_open(tmp_path / "sub" / "a.txt") as fh:
        fh.write("kept\n")
    assert (tmp_path / "sub" / "a.txt").read_text() == "kept\n"
    fail_files = True
    with pytest.raises(DepnmtError, match="a.txt: cannot write"):
        with atomic_open(tmp_path / "sub" / "a.txt") as fh:
            fh.write("new\n")
    assert (tmp_path / "sub" / "a.txt").read_text() == "kept\n"

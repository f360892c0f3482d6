"""depnmt.core.textio: every OSError and malformed .gz becomes one error naming the file; a failed
atomic write leaves the old file and no temporary file."""

from __future__ import annotations

import builtins
import errno
import gzip
import os
from pathlib import Path

import pytest

from depnmt.core import textio
from depnmt.core.errors import DepnmtError
from depnmt.core.textio import atomic_open, count_lines, read_json, read_lines, write_lines


def gz_lines(n: int) -> bytes:
    return gzip.compress("".join(f"line {i} of some text\n" for i in range(n)).encode())


def test_not_gzip_names_the_file(tmp_path):
    path = tmp_path / "train.en.gz"
    path.write_bytes(b"plain text, not gzip\n")
    for read in (read_lines, count_lines):
        with pytest.raises(DepnmtError, match=r"train.en.gz: not a gzip file"):
            read(path)


def test_truncated_gzip_names_file_and_line(tmp_path):
    data = gz_lines(20000)
    path = tmp_path / "cut.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(DepnmtError, match=r"cut.gz:(\d+): compressed data ends early") as info:
        read_lines(path)
    assert 1 < int(info.value.line) < 20000           # the lines before it were read
    with pytest.raises(DepnmtError, match=r"cut.gz: compressed data ends early"):
        count_lines(path)


def test_any_reader_of_a_truncated_gzip_gets_the_error(tmp_path):
    """Readers with their own line splitting (the CoNLL-U reader) use open_bytes directly."""
    data = gz_lines(20000)
    path = tmp_path / "cut.conllu.gz"
    path.write_bytes(data[: len(data) // 2])
    with textio.open_bytes(path) as fh, \
            pytest.raises(DepnmtError, match=r"cut.conllu.gz: compressed data ends early"):
        for _ in fh:
            pass


@pytest.mark.parametrize("damage", ["deflate", "crc"])
def test_corrupt_gzip_names_the_file(tmp_path, damage):
    data = gz_lines(20000)
    if damage == "deflate":
        data = data[:30] + b"\xff" * 20 + data[50:]
    else:
        data = data[:-8] + b"\0" * 8                    # CRC32 and size of the trailer
    path = tmp_path / "bad.gz"
    path.write_bytes(data)
    with pytest.raises(DepnmtError, match=r"bad.gz:\d+: corrupt gzip data"):
        read_lines(path)


def fail_open(monkeypatch, suffix: str, err: int = errno.EACCES) -> None:
    """``open`` of a path ending in ``suffix`` raises like an unreadable or unwritable file
    (chmod does not stop root, who may run the tests)."""
    real = builtins.open

    def fake(file, *args, **kwargs):
        if str(file).endswith(suffix):
            raise OSError(err, os.strerror(err), str(file))
        return real(file, *args, **kwargs)
    monkeypatch.setattr(builtins, "open", fake)


def test_unreadable_file_names_it(tmp_path, monkeypatch):
    path = tmp_path / "vocab.src.txt"
    path.write_text("a\t1\n")
    fail_open(monkeypatch, "vocab.src.txt")
    with pytest.raises(DepnmtError, match=r"vocab.src.txt: cannot read: Permission denied"):
        read_lines(path)


def test_path_under_a_file_is_not_a_directory(tmp_path):
    (tmp_path / "file").write_text("x\n")
    with pytest.raises(DepnmtError, match=r"file/x: cannot read: Not a directory"):
        read_lines(tmp_path / "file" / "x")
    with pytest.raises(DepnmtError, match=r"file/out: cannot create the folder: Not a "
                                          r"directory"):
        write_lines(tmp_path / "file" / "out" / "a.txt", ["x"])
    with pytest.raises(DepnmtError, match=r"file: exists and is not a folder"):
        textio.make_dir(tmp_path / "file")


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


@pytest.mark.parametrize("step", ["write", "fsync", "replace"])
def test_failed_write_keeps_the_old_file_and_no_temporary(tmp_path, monkeypatch, step):
    """No space left at any step of an atomic write: the error names the file, the old
    contents stay, the temporary file is removed. The write step writes the temporary file
    through /dev/full (ENOSPC from the kernel); a file size limit: tests/cli/test_errors.py."""
    path = tmp_path / "out.txt"
    write_lines(path, ["old"])
    if step == "write":
        if not Path("/dev/full").exists():
            pytest.skip("no /dev/full")
        real = textio.tempfile.mkstemp

        def full_mkstemp(*args, **kwargs):
            fd, name = real(*args, **kwargs)
            full = os.open("/dev/full", os.O_WRONLY)
            os.dup2(full, fd)
            os.close(full)
            return fd, name
        monkeypatch.setattr(textio.tempfile, "mkstemp", full_mkstemp)
    else:
        def no_space(*args, **kwargs):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        monkeypatch.setattr(os, step, no_space)
    with pytest.raises(DepnmtError, match=r"out.txt: cannot write: No space left on device"):
        write_lines(path, ["new"] * 100000)
    assert read_lines(path) == ["old"]
    assert leftovers(tmp_path) == []


def test_unwritable_folder_names_the_file(tmp_path, monkeypatch):
    def denied(*args, **kwargs):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(tmp_path))
    monkeypatch.setattr(textio.tempfile, "mkstemp", denied)
    with pytest.raises(DepnmtError, match=r"out.txt: cannot write: Permission denied"):
        with atomic_open(tmp_path / "out.txt") as fh:
            fh.write("x")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_read_only_folder_really(tmp_path):
    folder = tmp_path / "ro"
    write_lines(folder / "out.txt", ["old"])
    folder.chmod(0o555)
    try:
        with pytest.raises(DepnmtError, match=r"out.txt: cannot write: Permission denied"):
            write_lines(folder / "out.txt", ["new"])
        assert read_lines(folder / "out.txt") == ["old"]
    finally:
        folder.chmod(0o755)


@pytest.mark.parametrize("text, message", [
    (b'{"a": 1,\n "b": }', r"x.json:2: not valid JSON"),
    (b"[1, 2]", r"x.json: expected a JSON object, found list"),
    (b"\xff\xfe{}", r"x.json: not UTF-8 text"),
])
def test_read_json_errors_name_the_file(tmp_path, text, message):
    (tmp_path / "x.json").write_bytes(text)
    with pytest.raises(DepnmtError, match=message):
        read_json(tmp_path / "x.json", "missing")


def test_temporary_files_of_killed_writers_are_removed_by_the_next_write(tmp_path, capsys):
    """A writer killed mid-write leaves ``.NAME.HOST-PID.XXXXXXXX.tmp``; the next write of NAME
    on this host removes it (a warning names the file) when PID no longer runs, and keeps the
    temporary files of running writers, of other hosts and of other files."""
    import socket
    import subprocess
    import sys
    host = socket.gethostname()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead = int(gone.stdout)
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        out = tmp_path / "out.txt"
        stale = tmp_path / f".out.txt.{host}-{dead}.abcd1234.tmp"
        kept = [tmp_path / f".out.txt.{host}-{running.pid}.abcd1234.tmp",
                tmp_path / f".out.txt.other-host-{dead}.abcd1234.tmp",
                tmp_path / f".out.txt.gz.{host}-{dead}.abcd1234.tmp",
                tmp_path / ".out.txt.k2j3h4g5.tmp"]                  # no owner in the name
        for temp in [stale, *kept]:
            temp.write_text("partial")
        with atomic_open(out) as fh:
            mine = list(tmp_path.glob(f".out.txt.{host}-{os.getpid()}.*.tmp"))
            assert len(mine) == 1                                     # named after its writer
            fh.write("done\n")
        assert out.read_text() == "done\n" and not stale.exists()
        assert all(temp.exists() for temp in kept)
        err = capsys.readouterr().err
        assert f"{out}: removed {stale.name}, the partial output of a writer that was killed" \
            in err
    finally:
        running.kill()
        running.wait()


AWKWARD = (b"plain\n\ncrlf\r\n\r\nlone\rcr\n  spaces  \n\xe2\x82\xac euro\nbad \xff byte\n"
           b"cut \xe2\x82\nform\x0cfeed\xe2\x80\xa8sep\nlast line without newline\r")


@pytest.mark.parametrize("size", [1, 2, 3, 7, 16, 64, 1 << 20])
@pytest.mark.parametrize("tail", [b"", b"\n", b"\r\n", b"\xff"])
def test_text_blocks_hold_the_lines_iter_lines_reads(tmp_path, capsys, size, tail):
    """Whole lines only, numbered from the block's first, decoded exactly as iter_lines does,
    and the invalid-UTF-8 warning once, naming the first bad line."""
    path = tmp_path / "text.en"
    path.write_bytes(AWKWARD + tail)
    expected = read_lines(path)
    warning = capsys.readouterr().err
    blocks = list(textio.text_blocks(path, size))
    assert capsys.readouterr().err == warning and "text.en:8: invalid UTF-8" in warning
    assert [line for block in blocks for line in block.lines()] == expected
    assert sum(len(block) for block in blocks) == len(expected) == count_lines(path)
    assert [b.first_line for b in blocks] == [1 + sum(len(b) for b in blocks[:i])
                                              for i in range(len(blocks))]
    assert all(b.data.endswith(b"\n") for b in blocks[:-1]) and len(blocks) > (size < 64)


def test_text_blocks_name_the_line_of_a_read_error(tmp_path):
    data = gz_lines(20000)
    path = tmp_path / "cut.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(DepnmtError, match=r"cut.gz:(\d+): compressed data ends early") as info:
        for _ in textio.text_blocks(path, 4096):
            pass
    assert 1 < int(info.value.line) < 20000


def test_message_stream_drops_what_it_cannot_write(monkeypatch):
    """Standard error on a full disk (or a pipe without reader): the write is dropped, fd 2
    pointed at /dev/null, later messages dropped too, and nothing is raised."""
    class Full:
        encoding, errors, written = "utf-8", "strict", []

        def write(self, text):
            if text.startswith("full"):
                raise OSError(errno.ENOSPC, "No space left on device")
            self.written.append(text)
            return len(text)

        def flush(self):
            pass

        def isatty(self):
            return False

    pointed = []
    monkeypatch.setattr(os, "dup2", lambda fd, to: pointed.append(to))
    stream = textio.MessageStream(Full())
    assert stream.write("fine\n") == 5 and Full.written == ["fine\n"]
    assert stream.write("full disk\n") == 10 and pointed == [2]
    assert stream.write("after\n") == 6 and Full.written == ["fine\n"]   # dropped, no retry
    stream.flush()
    assert stream.encoding == "utf-8" and not stream.isatty() and stream.writable()

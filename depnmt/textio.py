"""Reading and writing line-oriented text files (plain or gzip) safely.

* Invalid UTF-8 is replaced (U+FFFD), never fatal; one warning names the file and first bad line.
* Writes are atomic: data goes to a temporary file in the same folder, then ``os.replace``.
"""

from __future__ import annotations

import gzip
import io
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterable, Iterator

from .errors import DepnmtError
from .log import warn


def open_bytes(path: str | Path) -> IO[bytes]:
    """Open ``path`` for binary reading, transparently decompressing ``.gz``."""
    path = Path(path)
    if not path.exists():
        raise DepnmtError(f"{path}: no such file")
    if path.is_dir():
        raise DepnmtError(f"{path}: is a folder, a file was expected")
    if path.suffix == ".gz":
        return gzip.open(path, "rb")
    return open(path, "rb")


def decode_line(raw: bytes, path: str | Path, lineno: int, state: dict) -> str:
    """Decode one line as UTF-8, replacing invalid bytes and warning once per file."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        if not state.get("warned"):
            warn(f"{path}:{lineno}: invalid UTF-8 replaced by U+FFFD (further lines not reported)")
            state["warned"] = True
        return raw.decode("utf-8", errors="replace")


def iter_lines(path: str | Path, stream: IO[bytes] | None = None) -> Iterator[str]:
    """Yield the lines of a text file without their line terminator (``\\n`` or ``\\r\\n``).

    ``stream`` reads from an already-open binary stream (e.g. stdin) and uses ``path`` for messages.
    Form feeds, vertical tabs and other Unicode line separators inside a line are kept (only
    ``\\n`` ends a line), so the line count always equals ``wc -l`` (plus a final unterminated line).
    """
    state: dict = {}
    fh = stream if stream is not None else open_bytes(path)
    try:
        for lineno, raw in enumerate(fh, start=1):
            if raw.endswith(b"\n"):
                raw = raw[:-1]
                if raw.endswith(b"\r"):
                    raw = raw[:-1]
            yield decode_line(raw, path, lineno, state)
    finally:
        if stream is None:
            fh.close()


def read_lines(path: str | Path) -> list[str]:
    """All lines of ``path`` (see :func:`iter_lines`)."""
    return list(iter_lines(path))


def count_lines(path: str | Path) -> int:
    """Number of lines in ``path`` (a final line without ``\\n`` counts)."""
    n = 0
    last = b"\n"
    with open_bytes(path) as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            n += block.count(b"\n")
            last = block[-1:]
    return n + (0 if last == b"\n" else 1)


@contextmanager
def atomic_open(path: str | Path, mode: str = "w") -> Iterator[IO]:
    """Open a temporary file next to ``path``; on success it atomically replaces ``path``.

    A crash (even SIGKILL) leaves either the old file or the new one, never a partial file.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        binary = "b" in mode
        with os.fdopen(fd, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8",
                                                                         "newline": "\n"})) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())   # mkstemp makes 0600; give the usual permissions
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def read_json(path: str | Path, missing: str) -> dict:
    """Parse a JSON file; ``missing`` is the error message when it does not exist."""
    import json
    path = Path(path)
    if not path.exists():
        raise DepnmtError(missing)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DepnmtError(f"{path}: unreadable JSON ({exc})") from None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_lines(path: str | Path, lines: Iterable[str]) -> int:
    """Atomically write ``lines`` (one per line, ``\\n``-terminated); return how many were written."""
    n = 0
    with atomic_open(path) as fh:
        for line in lines:
            fh.write(line)
            fh.write("\n")
            n += 1
    return n


def stdin_bytes() -> IO[bytes]:
    """Standard input as a binary stream (messages name it ``<stdin>``)."""
    import sys
    return getattr(sys.stdin, "buffer", None) or io.BytesIO(sys.stdin.read().encode())


def stdin_lines() -> Iterator[str]:
    """Lines of standard input, decoded like files (invalid bytes replaced with a warning)."""
    return iter_lines("<stdin>", stream=stdin_bytes())

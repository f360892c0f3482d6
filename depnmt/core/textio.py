"""Reading and writing line-oriented text files (plain or gzip) safely.

* Invalid UTF-8 is replaced (U+FFFD), never fatal; one warning names the file and first bad line.
* Writes are atomic and durable: data goes to a temporary file in the same folder, is flushed
  to disk (``fsync``), replaces the file by ``os.replace`` and the folder is flushed too, so a
  file reported as written survives a power cut (:func:`fsync_path`). An appended log line is
  flushed to disk before :func:`append_line` returns.
* Every ``OSError`` (no space, file size limit, permission, not a directory, ...) and every
  malformed or truncated ``.gz`` becomes a :class:`~depnmt.core.errors.DepnmtError` naming the
  user's file (and the line being read), never the temporary file; a failed write leaves the
  old file in place and no temporary file behind. A temporary file is named after its writer
  (``.NAME.HOST-PID.XXXXXXXX.tmp``); one that a killed writer left (SIGKILL, a power cut) is
  removed, with a warning, by the next write of the same file on that host
  (:func:`remove_stale_temps`).
"""

from __future__ import annotations

import errno
import glob
import gzip
import io
import os
import socket
import tempfile
import zlib
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Iterable, Iterator

from depnmt.core.errors import DepnmtError, InputError, os_error, reason
from depnmt.core.log import warn

# what reading a (possibly gzipped) file can raise besides OSError: a truncated stream
# (EOFError) and corrupt deflate data (zlib.error)
READ_ERRORS = (OSError, EOFError, zlib.error)


class ReadError(InputError):
    """A file could not be read (see :func:`read_error`); ``cause`` is what reading raised."""

    def __init__(self, path: str | Path, line: int | None, message: str, cause: BaseException):
        super().__init__(path, line, message)
        self.cause = cause

    def __reduce__(self):
        return ReadError, (self.path, self.line, self.message, self.cause), self.__dict__


class _CheckedGzip(io.RawIOBase):
    """The decompressed bytes of a ``.gz`` file, read in blocks; malformed, corrupt or
    truncated data raises a :class:`ReadError` naming the file, whoever reads it
    (:func:`iter_lines` adds the line)."""

    def __init__(self, path: Path):
        self.path, self.gz = path, gzip.GzipFile(path, "rb")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        try:
            return self.gz.readinto(buffer)
        except READ_ERRORS as exc:
            raise read_error(self.path, None, exc) from None

    def close(self) -> None:
        if not self.closed:
            self.gz.close()
        super().close()


def open_bytes(path: str | Path) -> IO[bytes]:
    """Open ``path`` for binary reading, transparently decompressing ``.gz``; a ``.gz`` that is
    not gzip, corrupt or truncated raises a :class:`ReadError` naming it when read."""
    path = Path(path)
    try:
        if path.suffix == ".gz":
            return io.BufferedReader(_CheckedGzip(path), buffer_size=1 << 16)
        return open(path, "rb")
    except FileNotFoundError:
        raise DepnmtError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise DepnmtError(f"{path}: is a folder, a file was expected") from None
    except OSError as exc:
        raise os_error(path, "read", exc) from None


def read_error(path: str | Path, line: int | None, exc: BaseException) -> ReadError:
    """The error for ``exc`` (one of :data:`READ_ERRORS`, or a :class:`ReadError` to locate)
    raised while reading ``line`` of ``path``: the lines before it were read."""
    exc = exc.cause if isinstance(exc, ReadError) else exc
    if isinstance(exc, EOFError):
        message = "compressed data ends early (the file is truncated)"
    elif isinstance(exc, gzip.BadGzipFile) and str(exc).startswith("Not a gzipped file"):
        line, message = None, "not a gzip file (its name ends in .gz)"
    elif isinstance(exc, (gzip.BadGzipFile, zlib.error)):
        message = f"corrupt gzip data ({exc})"
    else:
        message = f"cannot read: {reason(exc)}"
    return ReadError(path, line, message, exc)


def decode_line(raw: bytes, path: str | Path, lineno: int, state: dict) -> str:
    """Decode one line as UTF-8, replacing invalid bytes and warning once per file."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        warn_invalid_utf8(path, lineno, state)
        return raw.decode("utf-8", errors="replace")


def warn_invalid_utf8(path: str | Path, lineno: int, state: dict) -> None:
    """The warning for the first line of a file with invalid UTF-8 (``state``: the file's)."""
    if not state.get("warned"):
        warn(f"{path}:{lineno}: invalid UTF-8 replaced by U+FFFD (further lines not reported)")
        state["warned"] = True


def iter_lines(path: str | Path, stream: IO[bytes] | None = None) -> Iterator[str]:
    """Yield the lines of a text file without their line terminator (``\\n`` or ``\\r\\n``).

    ``stream`` reads from an already-open binary stream (e.g. stdin) and uses ``path`` for messages.
    Form feeds, vertical tabs and other Unicode line separators inside a line are kept (only
    ``\\n`` ends a line), so the line count always equals ``wc -l`` (plus a final unterminated
    line).
    """
    state: dict = {}
    fh = stream if stream is not None else open_bytes(path)
    lineno = 0
    try:
        for lineno, raw in enumerate(fh, start=1):
            if raw.endswith(b"\n"):
                raw = raw[:-1]
                if raw.endswith(b"\r"):
                    raw = raw[:-1]
            yield decode_line(raw, path, lineno, state)
    except (ReadError, *READ_ERRORS) as exc:
        raise read_error(path, lineno + 1, exc) from None
    finally:
        if stream is None:
            fh.close()


@dataclass(frozen=True)
class TextBlock:
    """Consecutive whole lines of a text file as its bytes (each line ends with ``\\n``, but
    the file's last may not): what the data stages' worker processes decode, so that the
    process that reads the file only splits it (:func:`text_blocks`)."""

    path: str
    first_line: int          # the number of its first line in the file (1-based)
    data: bytes

    def lines(self) -> list[str]:
        """Its lines, exactly as :func:`iter_lines` yields them (invalid UTF-8 replaced
        without a warning: :func:`text_blocks` gave it)."""
        lines = self.data.decode("utf-8", errors="replace").split("\n")
        last = lines.pop()          # "" after a final "\n"; else a last line that keeps its "\r"
        lines = [line[:-1] if line.endswith("\r") else line for line in lines]
        return lines + [last] if last else lines

    def __len__(self) -> int:
        """Its number of lines."""
        return self.data.count(b"\n") + (0 if self.data.endswith(b"\n") else 1)


def text_blocks(path: str | Path, size: int) -> Iterator[TextBlock]:
    """The lines of ``path`` (plain or gzip) in :class:`TextBlock` of about ``size`` bytes
    (a longer line is a block of its own), read lazily. Warns about the first line with
    invalid UTF-8, and names the line being read in a read error, as :func:`iter_lines`."""
    state: dict = {}
    line, pending = 1, []           # pending: the read bytes of lines not ended yet
    with open_bytes(path) as fh:
        try:
            while chunk := fh.read(size):
                cut = chunk.rfind(b"\n") + 1
                if not cut:
                    pending.append(chunk)
                    continue
                block = TextBlock(str(path), line, b"".join([*pending, chunk[:cut]]))
                pending = [chunk[cut:]]
                _check_utf8(block, state)
                line += block.data.count(b"\n")
                yield block
        except (ReadError, *READ_ERRORS) as exc:
            raise read_error(path, line, exc) from None
    if any(pending):
        block = TextBlock(str(path), line, b"".join(pending))
        _check_utf8(block, state)
        yield block


def _check_utf8(block: TextBlock, state: dict) -> None:
    """Warn about the first line of ``block`` with invalid UTF-8 unless its file was warned
    about."""
    if state.get("warned") or block.data.isascii():
        return
    try:
        block.data.decode("utf-8")
    except UnicodeDecodeError as exc:
        lineno = block.first_line + block.data.count(b"\n", 0, exc.start)
        warn_invalid_utf8(block.path, lineno, state)


def read_lines(path: str | Path) -> list[str]:
    """All lines of ``path`` (see :func:`iter_lines`)."""
    return list(iter_lines(path))


def count_lines(path: str | Path) -> int:
    """Number of lines in ``path`` (a final line without ``\\n`` counts)."""
    n = 0
    last = b"\n"
    with open_bytes(path) as fh:
        try:
            for block in iter(lambda: fh.read(1 << 20), b""):
                n += block.count(b"\n")
                last = block[-1:]
        except READ_ERRORS as exc:    # somewhere in the block after line n: name no line
            raise read_error(path, None, exc) from None
    return n + (0 if last == b"\n" else 1)


class _NamedWriter(io.FileIO):
    """The raw temporary file of :func:`atomic_open`: a failed write (no space, file size
    limit, I/O error) names the file the user asked for."""

    def __init__(self, fd: int, target: Path):
        super().__init__(fd, "wb")
        self.target = target

    def write(self, data) -> int:
        with naming(self.target):
            return super().write(data)


def make_dir(path: str | Path) -> Path:
    """``mkdir -p path``, with an error naming the folder when it cannot be made; the folders
    it creates are flushed to disk (``fsync`` of the folder each one is created in)."""
    path = Path(path)
    created = [p for p in (path, *path.parents) if not os.path.exists(p)]
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise DepnmtError(f"{path}: exists and is not a folder") from None
    except OSError as exc:
        raise os_error(exc.filename or path, "create the folder", exc) from None
    for folder in reversed(created):
        fsync_path(folder.parent)
    return path


@contextmanager
def naming(path: str | Path, action: str = "write") -> Iterator[None]:
    """Turn an ``OSError`` inside the block into the error for ``action`` on ``path``."""
    try:
        yield
    except BrokenPipeError:
        raise            # standard output's reader went away: exit 141 quietly (depnmt.cli)
    except OSError as exc:
        raise os_error(path, action, exc) from None


STDOUT = "<stdout>"


def write_stdout(text: str, flush: bool = False) -> None:
    """Write ``text`` to standard output; a failure (a full disk under ``> FILE``) is an error
    naming ``<stdout>``."""
    import sys
    with naming(STDOUT):
        sys.stdout.write(text)
        if flush:
            sys.stdout.flush()


TEMP_SUFFIX = ".tmp"


def temp_prefix(path: Path) -> str:
    """The start of this process's temporary files for ``path``: ``.NAME.HOST-PID.``."""
    return f".{path.name}.{socket.gethostname()}-{os.getpid()}."


def _running(pid: int) -> bool:
    """Whether process ``pid`` exists on this host (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:                     # PermissionError: it exists
        return True
    return True


def remove_stale_temps(path: Path) -> list[Path]:
    """Remove the temporary files of ``path`` (:func:`temp_prefix`) whose writer ran on this host
    and no longer runs, with a warning naming ``path``; returns them. Files of running writers,
    of other hosts and of unknown owners are kept."""
    host, start = socket.gethostname(), f".{path.name}."
    removed = []
    for temp in path.parent.glob(glob.escape(start) + "*" + TEMP_SUFFIX):
        owner = temp.name[len(start):-len(TEMP_SUFFIX)].rpartition(".")[0]   # HOST-PID
        pid = owner[len(host) + 1:]
        if owner.startswith(host + "-") and pid.isdigit() and not _running(int(pid)):
            try:
                temp.unlink()
            except OSError:
                continue
            removed.append(temp)
    if removed:
        warn(f"{path}: removed {', '.join(t.name for t in removed)}, the partial output of a "
             f"writer that was killed")
    return removed


@contextmanager
def atomic_open(path: str | Path, mode: str = "w") -> Iterator[IO]:
    """Open a temporary file next to ``path`` (first removing those killed writers of it left,
    :func:`remove_stale_temps`); on success it atomically replaces ``path``.

    A crash (even SIGKILL) leaves either the old file or the new one, never a partial file;
    when the block ends the file's data and the folder's entry for it are on disk (``fsync``
    of both), so a power cut cannot undo it either. A failed write, flush, ``fsync`` or rename
    raises an error naming ``path``; the temporary file is removed and the old ``path`` is
    left as it was.
    """
    path = Path(path)
    make_dir(path.parent)
    with naming(path):
        remove_stale_temps(path)
        fd, tmp = tempfile.mkstemp(prefix=temp_prefix(path), suffix=TEMP_SUFFIX, dir=path.parent)
    try:
        buffered = io.BufferedWriter(_NamedWriter(fd, path))
        with (buffered if "b" in mode else
              io.TextIOWrapper(buffered, encoding="utf-8", newline="\n")) as fh:
            yield fh
            fh.flush()
            with naming(path):
                os.fsync(fh.fileno())
        with naming(path):
            os.chmod(tmp, 0o666 & ~_umask())   # mkstemp makes 0600; give the usual permissions
            os.replace(tmp, path)
        fsync_path(path.parent)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def read_json(path: str | Path, missing: str) -> dict:
    """Parse a file holding one JSON object; ``missing`` is the error message when it does not
    exist. Anything else (unreadable, not UTF-8, not JSON, not an object) is an error naming
    the file (and the line, for a JSON syntax error)."""
    import json
    path = Path(path)
    if not path.exists():
        raise DepnmtError(missing)
    with naming(path, "read"):
        data = path.read_bytes()
    try:
        value = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise InputError(path, None, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise InputError(path, exc.lineno, f"not valid JSON ({exc.msg}, column {exc.colno})"
                         ) from None
    if not isinstance(value, dict):
        raise InputError(path, None, f"expected a JSON object, found {type(value).__name__}")
    return value


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def append_line(path: str | Path, line: str) -> None:
    """Append ``line`` and a newline to a log file (not atomic: a log grows) and flush it to
    disk (``fsync``; the folder too when this created the file); an error names ``path``."""
    path = Path(path)
    created = not path.exists()
    with naming(path), open(path, "a", encoding="utf-8") as fh:
        fh.write(line + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    if created:
        fsync_path(path.parent)


# a folder that cannot be opened for reading (write-only), or a file system that cannot flush
# folders: the data is written, only its folder entry's flush is skipped
FOLDER_FSYNC_UNSUPPORTED = (errno.EACCES, errno.EPERM, errno.EINVAL, errno.ENOTSUP)


def fsync_path(path: str | Path) -> None:
    """Flush a file's data, or a folder's entries (a file created or renamed in it), to disk;
    an error names ``path`` (none for a folder :data:`FOLDER_FSYNC_UNSUPPORTED` concerns)."""
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        if exc.errno in FOLDER_FSYNC_UNSUPPORTED and os.path.isdir(path):
            return
        raise os_error(path, "write", exc) from None


def write_lines(path: str | Path, lines: Iterable[str]) -> int:
    """Atomically write ``lines`` (one per line, ``\\n``-terminated); return how many were
    written."""
    n = 0
    with atomic_open(path) as fh:
        for line in lines:
            fh.write(line)
            fh.write("\n")
            n += 1
    return n


class ClosedStream(io.TextIOBase):
    """Stands for a standard stream the process was started without (``<&-``, ``>&-``): the
    interpreter makes it None, which fails on first use with an ``AttributeError``; reading or
    writing this one is a :class:`DepnmtError` naming it, and a command that does not use it
    runs as usual."""

    def __init__(self, name: str, hint: str):
        super().__init__()
        self.name, self.hint = name, hint

    def _closed(self, *args, **kwargs):
        raise DepnmtError(f"<{self.name}>: closed (the command was started without it); "
                          f"{self.hint}")

    write = read = readline = readlines = _closed

    def __iter__(self):
        return self._closed()

    def isatty(self) -> bool:
        return False

    def flush(self) -> None:
        pass


class MessageStream(io.TextIOBase):
    """Standard error for messages only: when it can no longer be written (its reader went
    away, as ``2>&1 | tee log`` whose ``tee`` was killed, or a full disk under ``2> FILE``),
    the messages from then on are dropped — file descriptor 2 is pointed at /dev/null, for
    whatever else writes there — and the command goes on: what it does and writes, and its
    exit status, never depend on whether someone reads its messages."""

    def __init__(self, stream: IO[str]):
        super().__init__()
        self.stream: IO[str] | None = stream       # None: dropping
        self._encoding = getattr(stream, "encoding", None) or "utf-8"

    def write(self, text: str) -> int:
        if self.stream is not None:
            try:
                return self.stream.write(text)
            except OSError:
                self._drop()
        return len(text)

    def flush(self) -> None:
        if self.stream is not None:
            try:
                self.stream.flush()
            except OSError:
                self._drop()

    def _drop(self) -> None:
        """Drop the messages from now on (what the old stream buffers could not be written),
        and point fd 2 at /dev/null where that can be done."""
        self.stream = None
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, 2)
            finally:
                os.close(devnull)
        except OSError:
            pass

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return self.stream is not None and self.stream.isatty()

    def fileno(self) -> int:
        return 2 if self.stream is None else self.stream.fileno()

    @property
    def encoding(self) -> str:
        return self._encoding

    @property
    def errors(self) -> str | None:
        return getattr(self.stream, "errors", None) or "backslashreplace"


def stand_in_for_closed_streams() -> None:
    """Replace a standard stream that the process was started without by a
    :class:`ClosedStream` (standard error by one that drops what is written: nothing else can
    be told)."""
    import sys
    if sys.stdin is None:
        sys.stdin = ClosedStream("stdin", "give the input as a file")
    if sys.stdout is None:
        sys.stdout = ClosedStream("stdout", "write the output to a file (-o FILE or > FILE)")
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 (for the process)


def guard_messages() -> None:
    """Make standard error a :class:`MessageStream` (the console process: it owns fd 2)."""
    import sys
    if sys.stderr is not None and not isinstance(sys.stderr, MessageStream):
        sys.stderr = MessageStream(sys.stderr)


def stdin_bytes() -> IO[bytes]:
    """Standard input as a binary stream (messages name it ``<stdin>``)."""
    import sys
    return getattr(sys.stdin, "buffer", None) or io.BytesIO(sys.stdin.read().encode())


def stdin_lines() -> Iterator[str]:
    """Lines of standard input, decoded like files (invalid bytes replaced with a warning)."""
    return iter_lines("<stdin>", stream=stdin_bytes())

"""User-facing errors: the CLI prints these as one line (no traceback) and exits non-zero."""

from __future__ import annotations

from pathlib import Path


class DepnmtError(Exception):
    """An error caused by the user's input or environment, printed as ``error: <message>``."""


class InputError(DepnmtError):
    """Bad content in an input file, located by file and (1-based) line number."""

    def __init__(self, path: str | Path, line: int | None, message: str):
        self.path = str(path)
        self.line = line
        self.message = message
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {message}")

    def __reduce__(self):
        """Pickled as its parts (a worker process of ``--jobs`` hands it to the stage)."""
        return type(self), (self.path, self.line, self.message), self.__dict__


def os_error(path: str | Path, action: str, exc: BaseException, line: int | None = None
             ) -> InputError:
    """The one-line error for an ``OSError`` (or a decompression error) met while doing
    ``action`` ("read", "write", "create the folder") on ``path``, e.g.
    ``out/train.en: cannot write: No space left on device``. Disk full (ENOSPC) and a file size
    limit (EFBIG, ``ulimit -f``) take this same path."""
    return InputError(path, line, f"cannot {action}: {reason(exc)}")


def reason(exc: BaseException) -> str:
    """What went wrong, without the errno and file name (``No space left on device``)."""
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


class UsageError(DepnmtError):
    """Options that do not go together (``--d-model 100 --heads 8``): the command line reports
    it as a usage error, as it does a malformed flag."""

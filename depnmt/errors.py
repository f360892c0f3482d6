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
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {message}")

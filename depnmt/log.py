"""Messages on stderr (stdout is reserved for data, e.g. ``translate`` output) and progress bars."""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from typing import Iterable, Iterator, TypeVar

from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                           TimeRemainingColumn)

T = TypeVar("T")

console = Console(stderr=True, highlight=False, soft_wrap=True)
_muted = False


def mute() -> None:
    """Silence this process's messages, warnings and progress bars (errors still go out): the
    ranks other than 0 of a distributed run, so that everything is printed once."""
    global _muted
    _muted = console.quiet = True


def info(message: str) -> None:
    """Print a progress/status message on stderr."""
    console.print(message, markup=False)


def warn(message: str) -> None:
    """Print a warning on stderr, prefixed ``warning:``."""
    if not _muted:
        print(f"warning: {message}", file=sys.stderr, flush=True)


def progress_enabled() -> bool:
    """Progress bars are drawn unless ``DEPNMT_NO_PROGRESS`` is set (tests and CI logs set it)
    or this process is muted."""
    return not os.environ.get("DEPNMT_NO_PROGRESS") and not _muted


@contextmanager
def progress_bar() -> Iterator[Progress]:
    """A rich progress display on stderr; add tasks with ``bar.add_task(description, total=N)``."""
    bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn(), TimeRemainingColumn(), console=console,
                   disable=not progress_enabled(), transient=False)
    with bar:
        yield bar


def track(items: Iterable[T], description: str, total: int | None = None) -> Iterator[T]:
    """Iterate over ``items`` while drawing one progress bar."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with progress_bar() as bar:
        task = bar.add_task(description, total=total)
        for item in items:
            yield item
            bar.advance(task)

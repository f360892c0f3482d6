"""Messages on stderr (stdout is reserved for data, e.g. ``translate`` output) and progress bars."""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from typing import Callable, Iterable, Iterator, TypeVar

from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, ProgressColumn, Task,
                           TextColumn, TimeElapsedColumn, TimeRemainingColumn)
from rich.text import Text

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


def on_terminal() -> bool:
    """Whether standard error is a terminal (rich's test: ``FORCE_COLOR`` and ``TTY_COMPATIBLE``
    count) and progress bars are enabled (:func:`progress_enabled`)."""
    return console.is_terminal and progress_enabled()


class RateColumn(ProgressColumn):
    """A task's speed, ``12.3 lines/s``: rich's estimate over the last seconds, else (a task
    done in one step) its average since it started; empty before anything is done."""

    def __init__(self, unit: str):
        super().__init__()
        self.unit = unit

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        if speed is None and task.completed and task.elapsed:
            speed = task.completed / task.elapsed
        return Text("" if speed is None else f"{speed:,.1f} {self.unit}/s")


@contextmanager
def progress_bar(rate: str | None = None, redirect_stdout: bool = True) -> Iterator[Progress]:
    """A rich progress display on stderr; add tasks with ``bar.add_task(description, total=N)``;
    ``rate``: the unit of a column of each task's speed (``lines``: ``12.3 lines/s``).
    ``redirect_stdout`` False: standard output is left alone while the bar is drawn (rich would
    print what is written there on stderr, above the bar)."""
    columns = [TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               *([RateColumn(rate)] if rate else []), TimeElapsedColumn(), TimeRemainingColumn()]
    bar = Progress(*columns, console=console, disable=not progress_enabled(), transient=False,
                   redirect_stdout=redirect_stdout)
    with bar:
        yield bar


@contextmanager
def terminal_progress(description: str, total: int | None, unit: str = "lines"
                      ) -> Iterator[Callable[[int], None]]:
    """``advance(n)``: ``n`` more ``unit`` done. On a terminal (:func:`on_terminal`) a progress
    bar shows them with their rate and, when ``total`` is known, the time left; elsewhere (a
    pipe, a file, the tests) nothing is drawn and ``advance`` does nothing, so the output is
    what it is without the bar. Standard output is left alone (the command's data); messages
    on stderr are printed above the bar."""
    if not on_terminal():
        yield lambda n: None
        return
    with progress_bar(rate=unit, redirect_stdout=False) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n: bar.advance(task, n)


def track(items: Iterable[T], description: str, total: int | None = None) -> Iterator[T]:
    """Iterate over ``items`` while drawing one progress bar."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with progress_bar() as bar:
        task = bar.add_task(description, total=total)
        for item in items:
            yield item
            bar.advance(task)

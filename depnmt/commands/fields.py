"""Flags from configuration fields: each :class:`~depnmt.core.optionspec.Param` (a training run's
options, :func:`depnmt.training.config.train_params`; the schemes' options among them; the settings
dataclasses of the other commands, :func:`depnmt.core.optionspec.field_params`) becomes one click
option with its help, default and value checks, so adding an option is adding a field."""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable

import click

from depnmt.core.optionspec import (EMPTY_PATH, Choice, File, FloatRange, Folder, IntRange, Kind,
                                    Param, Processes)


def click_type(kind: Kind) -> Any:
    """The click type of a value kind (:mod:`depnmt.core.optionspec`); a Python type stays
    itself."""
    from pathlib import Path
    if isinstance(kind, Choice):
        return click.Choice(kind.choices)
    if isinstance(kind, IntRange):
        return click.IntRange(kind.min, kind.max)
    if isinstance(kind, FloatRange):
        return FiniteFloatRange(kind.min, kind.max, min_open=kind.min_open,
                                max_open=kind.max_open)
    if isinstance(kind, Folder):
        return GivenPath(path_type=None if kind.text else Path, file_okay=False,
                         exists=kind.exists)
    if isinstance(kind, File):
        return GivenPath(path_type=None if kind.text else Path, dir_okay=kind.or_folder,
                         exists=kind.exists)
    if isinstance(kind, Processes):
        return Jobs()
    if isinstance(kind, tuple):
        return tuple(click_type(part) for part in kind)
    return kind


class GivenPath(click.Path):
    """A ``click.Path`` that is not empty: ``-o "$OUT"`` with ``OUT`` unset is a usage error,
    not the current folder (``Path("")`` is ``.``)."""

    def convert(self, value, param, ctx):
        if isinstance(value, str) and value == "":
            self.fail(EMPTY_PATH, param, ctx)
        return super().convert(value, param, ctx)


class Jobs(click.ParamType):
    """``--jobs``: a number of processes ≥ 1, or ``auto`` (the cores this process may use)."""

    name = "jobs"

    def convert(self, value, param, ctx):
        from depnmt.core.errors import DepnmtError
        from depnmt.core.workers import resolve_jobs
        try:
            return resolve_jobs(value)
        except DepnmtError:
            self.fail(f"{value!r} is not a number of processes (1, 2, ...) or 'auto'", param, ctx)


class FiniteFloatRange(click.FloatRange):
    """click's ``FloatRange`` without ``nan`` and ``inf`` (which its bounds let through, and
    which would train to NaN weights or end in a traceback)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None):
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number


def click_callback(check: Callable[[Any], Any] | None) -> Callable | None:
    """A click callback running ``check``: its ValueError becomes click's ``BadParameter``."""
    if check is None:
        return None

    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        try:
            return check(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc)) from None
    return callback


class EnvironmentDefault(click.Option):
    """An option whose environment variable (``$DEPNMT_PRECISION``) sets its default: a value
    of a ``--config`` file (click's ``default_map``) wins over the variable, as a flag on the
    command line does. click alone takes the variable first, so the file's value was dropped
    without a word."""

    def consume_value(self, ctx: click.Context, opts: Any) -> tuple[Any, Any]:
        from click.core import ParameterSource
        value, source = super().consume_value(ctx, opts)
        configured = ctx.default_map or {}
        if source is ParameterSource.ENVIRONMENT and configured.get(self.name) is not None:
            return configured[self.name], ParameterSource.DEFAULT_MAP
        return value, source


def click_option(param: Param) -> click.Option:
    """The flag of ``param`` (one with an environment variable: :class:`EnvironmentDefault`)."""
    kind = dict(is_flag=True) if param.kind is bool else dict(type=click_type(param.kind))
    extra = {} if param.show_default is None else dict(show_default=param.show_default)
    if param.multiple:
        extra["multiple"] = True
    if param.nargs != 1:
        extra["nargs"] = param.nargs
    option = EnvironmentDefault if param.envvar is not None else click.Option
    return option([*param.flags, param.name], default=param.default, help=param.help,
                        required=param.required, metavar=param.metavar, hidden=param.hidden,
                        envvar=param.envvar, show_envvar=param.envvar is not None,
                        callback=click_callback(param.check), **kind, **extra)


def click_options(params: Iterable[Param]) -> Callable:
    """A decorator adding the flags of ``params`` to a command's function, in their order, as
    one ``@click.option`` line each would (``@click_options(search_params("translate"))``)."""
    options = [click_option(param) for param in params]

    def add(function: Callable) -> Callable:
        if isinstance(function, click.Command):
            function.params.extend(options)
        else:               # what @click.option does: the command takes them in reverse
            function.__click_params__ = [*getattr(function, "__click_params__", []),
                                         *reversed(options)]
        return function
    return add

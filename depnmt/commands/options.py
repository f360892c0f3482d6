"""What the commands' options share: the value ranges of the numeric options (click rejects a
value out of range with a usage error naming the option, exit status 2), ``--config FILE``, and
the 0.1.0 spellings of options that still work, with a warning
(:data:`~depnmt.core.compat.DEPRECATED`)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import click

from depnmt.commands.fields import GivenPath, click_type
from depnmt.core import optionspec
from depnmt.core.compat import DEPRECATED, deprecation_message
from depnmt.core.optionspec import config_where, plain_value, read_yaml_config, suggestion

POSITIVE = click_type(optionspec.POSITIVE)
COUNT = click_type(optionspec.COUNT)                # 0 usually means "off" or "no limit"
AMOUNT = click_type(optionspec.AMOUNT)
RATE = click_type(optionspec.RATE)                  # a learning rate
DROPOUT = click_type(optionspec.DROPOUT)            # dropout, label smoothing: 1 leaves nothing
SEED = click_type(optionspec.SEED)                  # what every random generator accepts


# -- --config FILE: a command's options from a YAML file -------------------------------------
def config_option(help: str | None = None):
    """A ``--config FILE`` option for any command: FILE (YAML) maps option names to values —
    keys as the long flags without their dashes (``max-tokens`` or ``max_tokens``), values of
    the option's type (a list for an option given several times). The file's values are
    click's ``default_map`` (read before the other options, ``is_eager``), so a flag given on
    the command line wins over the file, and click converts and checks each value as it does
    a flag's; their :class:`~click.core.ParameterSource` is ``DEFAULT_MAP``. An unknown key is
    a :class:`~depnmt.core.errors.DepnmtError` naming the file and the key."""
    return click.option(
        "--config", "config_file", type=GivenPath(dir_okay=False, exists=True),
        is_eager=True, expose_value=False, callback=_read_config_option,
        help=help or "read options from this YAML file (`max-tokens: 4000`, one per line; "
                     "flags given on the command line win)")


def _read_config_option(ctx: click.Context, param: click.Parameter, path: str | None) -> None:
    if path is not None:
        apply_config(ctx, read_yaml_config(path), path)


def apply_config(ctx: click.Context, config: dict, source: str) -> None:
    """Check ``config`` (option name -> value, from ``source``) against ``ctx.command``'s
    options and make it the context's ``default_map``. An unknown or repeated key is a
    DepnmtError naming ``source`` and the key; a bad value is click's ``BadParameter`` naming
    the option and ``source``."""
    from depnmt.core.errors import DepnmtError
    options = config_keys(ctx.command)
    defaults: dict[str, object] = {}
    keys: dict[str, str] = {}                       # parameter name -> the key that set it
    for key, value in config.items():
        where = config_where(config, key, source)   # FILE:LINE
        param = config_param(ctx.command, str(key), where)
        if param is None:
            raise DepnmtError(f"{where}: unknown option '{key}'{suggestion(str(key), options)}")
        if param.name in keys:
            also = f" (also as '{keys[param.name]}')" if keys[param.name] != key else ""
            raise DepnmtError(f"{where}: option '{key}' is given twice{also}")
        keys[param.name] = key
        if value is not None:                       # `key:` with no value: the default
            defaults[param.name] = checked_value(ctx, param, value, f"{key} in {where}")
    ctx.default_map = {**(ctx.default_map or {}), **defaults}


def config_param(command: click.Command, key: str, source: str) -> click.Option | None:
    """The option a ``--config`` key sets (None: no option of ``command``); an old spelling
    (:data:`DEPRECATED`) gives its new option, with a warning naming ``source``."""
    from depnmt.core.log import warn
    key = key.replace("_", "-")
    param = config_keys(command).get(key)
    alias = deprecated_keys(command).get(key)
    if param is None and alias is not None:
        param = alias.target
        new_key = next(opt[2:] for opt in param.opts if opt.startswith("--"))
        warn(f"{source}: {deprecation_message(repr(key), repr(new_key))}")
    return param


def config_keys(command: click.Command) -> dict[str, click.Option]:
    """Key -> option of every option ``--config`` can set: each long flag without its dashes
    (``--max-tokens`` -> ``max-tokens``; not the ``--no-...`` side of a boolean flag)."""
    return {opt[2:]: param for param in command.params
            if isinstance(param, click.Option) and param.expose_value
            for opt in param.opts if opt.startswith("--")}


def checked_value(ctx: click.Context, param: click.Parameter, value: object, where: str):
    """``value`` converted and checked as the option's flag would be (its type and callback);
    click's ``BadParameter`` naming the option and ``where`` if it does not fit. A YAML float
    or boolean is not taken for an integer option (click would truncate it)."""
    hint = f"'{param.opts[-1]}' ({where})"
    if isinstance(param.type, click.types.IntParamType) \
            and (isinstance(value, bool) or isinstance(value, float)):
        raise click.BadParameter(f"{value!r} is not an integer", ctx=ctx, param_hint=hint)
    if isinstance(value, (list, dict)) and not (param.multiple and isinstance(value, list)):
        kind = "a list" if isinstance(value, list) else "a mapping"
        raise click.BadParameter(f"{kind} where one value belongs", ctx=ctx, param_hint=hint)
    try:
        return param.process_value(ctx, value)
    except click.BadParameter as exc:
        raise click.BadParameter(exc.message, ctx=ctx, param_hint=hint) from None


def config_settings(command: click.Command, values: dict[str, object]) -> dict[str, object]:
    """The reverse of :func:`apply_config`: ``values`` (option name -> value) as a mapping a
    ``--config`` file can hold (key: the option's first long flag without dashes; paths as
    strings, absolute; an option given several times as a list), in the command's order of
    options; None values are left out."""
    keys: dict[str, str] = {}                       # option name -> its first key
    for key, param in config_keys(command).items():
        keys.setdefault(param.name, key)
    return {key: plain_value(values[name]) for name, key in keys.items()
            if values.get(name) is not None}


class DeprecatedAlias(click.Option):
    """A hidden option spelled ``old`` that stands for ``target`` (another option of the same
    command): what it is given becomes ``target``'s value, parsed and checked by ``target``
    (its type, callback, ``required``) as if ``target``'s own flag had been given, after one
    ``warning: OLD is deprecated; use NEW ...`` line on stderr. Given with ``target``'s own
    flag too, it is a usage error naming both. Eager, so it hands its value over before
    ``target`` is processed."""

    def __init__(self, old: str, new: str, target: click.Option):
        name = f"deprecated_{old.lstrip('-').replace('-', '_')}"
        super().__init__([old, name], hidden=True, is_eager=True, expose_value=False,
                         multiple=target.multiple, nargs=target.nargs, type=click.UNPROCESSED)
        self.old, self.new, self.target = old, new, target

    def handle_parse_result(self, ctx: click.Context, opts, args: list[str]):
        """Move the value parsed for the old flag in ``opts`` (name -> raw value, shared by
        every parameter of this parse) to ``target``'s name, warning once."""
        if self.name in opts:
            if self.target.name in opts:
                raise click.UsageError(f"{self.old} (the old spelling of {self.new}) and "
                                       f"{self.new} are the same option: give {self.new} once",
                                       ctx=ctx)
            opts[self.target.name] = opts.pop(self.name)
            if not ctx.resilient_parsing:
                from depnmt.core.log import warn
                warn(deprecation_message(self.old, self.new))
        return None, args


def deprecated_aliases(name: str):
    """Decorator of a click command (above ``@click.command``): add a
    :class:`DeprecatedAlias` for each entry of ``DEPRECATED[name]``. An entry whose new flag
    the command lacks, or whose old flag is still one of its visible flags, is a bug, raised
    at import."""
    def deco(command: click.Command) -> click.Command:
        options = {opt: param for param in command.params if isinstance(param, click.Option)
                   for opt in param.opts + param.secondary_opts}
        for old, new in DEPRECATED[name].items():
            target = options.get(new.split("/")[-1])
            if target is None or old in options:
                raise ValueError(f"DEPRECATED[{name!r}][{old!r}]: {command.name} has "
                                 f"{'no ' + new if target is None else 'a visible ' + old}")
            command.params.append(DeprecatedAlias(old, new, target))
        return command
    return deco


def deprecated_keys(command: click.Command) -> dict[str, DeprecatedAlias]:
    """Old ``--config`` key (an old long flag without its dashes) -> its alias."""
    return {param.old[2:]: param for param in command.params
            if isinstance(param, DeprecatedAlias) and param.old.startswith("--")}


@contextmanager
def usage_errors() -> Iterator[None]:
    """A :class:`~depnmt.core.errors.UsageError` of the library (options that do not go together)
    raised in the block becomes click's, as the command line reports a malformed flag."""
    from depnmt.core.errors import UsageError
    try:
        yield
    except UsageError as exc:
        raise click.UsageError(str(exc)) from None

"""Value ranges of the numeric CLI options, shared by the commands (click rejects a value out
of range with a usage error naming the option, exit status 2)."""

from __future__ import annotations

import click

POSITIVE = click.IntRange(min=1)
COUNT = click.IntRange(min=0)                       # 0 usually means "off" or "no limit"
AMOUNT = click.FloatRange(min=0)
RATE = click.FloatRange(min=0, min_open=True)       # a learning rate
DROPOUT = click.FloatRange(0, 1, max_open=True)     # dropout, label smoothing: 1 leaves nothing
SEED = click.IntRange(0, 2**32 - 1)                 # what every random generator accepts


# -- --config FILE: a command's options from a YAML file -------------------------------------
def config_option(help: str | None = None):
    """A ``--config FILE`` option for any command: FILE (YAML) maps option names to values —
    keys as the long flags without their dashes (``max-tokens`` or ``max_tokens``), values of
    the option's type (a list for an option given several times). The file's values are
    click's ``default_map`` (read before the other options, ``is_eager``), so a flag given on
    the command line wins over the file, and click converts and checks each value as it does
    a flag's; their :class:`~click.core.ParameterSource` is ``DEFAULT_MAP``. An unknown key is
    a :class:`~depnmt.errors.DepnmtError` naming the file and the key."""
    return click.option(
        "--config", "config_file", type=click.Path(dir_okay=False, exists=True),
        is_eager=True, expose_value=False, callback=_read_config_option,
        help=help or "read options from this YAML file (`max-tokens: 4000`, one per line; "
                     "flags given on the command line win)")


def _read_config_option(ctx: click.Context, param: click.Parameter, path: str | None) -> None:
    if path is not None:
        apply_config(ctx, read_yaml_config(path), path)


def read_yaml_config(path: str) -> dict:
    """The mapping in the YAML file ``path`` (an empty file: ``{}``); a DepnmtError naming the
    file when it is not valid YAML or not a mapping."""
    import yaml
    from ..errors import DepnmtError
    from ..textio import read_lines
    try:
        data = yaml.safe_load("\n".join(read_lines(path)))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else path
        raise DepnmtError(f"{where}: not valid YAML ({getattr(exc, 'problem', None) or exc})") \
            from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise DepnmtError(f"{path}: expected a mapping of option names to values "
                          f"(`max-tokens: 4000`), found a {type(data).__name__}")
    return data


def apply_config(ctx: click.Context, config: dict, source: str) -> None:
    """Check ``config`` (option name -> value, from ``source``) against ``ctx.command``'s
    options and make it the context's ``default_map``. An unknown or repeated key is a
    DepnmtError naming ``source`` and the key; a bad value is click's ``BadParameter`` naming
    the option and ``source``."""
    from ..errors import DepnmtError
    options = config_keys(ctx.command)
    defaults: dict[str, object] = {}
    for key, value in config.items():
        param = options.get(str(key).replace("_", "-"))
        if param is None:
            raise DepnmtError(f"{source}: unknown option '{key}'{suggestion(str(key), options)}")
        if param.name in defaults:
            raise DepnmtError(f"{source}: option '{key}' is given twice")
        if value is not None:                       # `key:` with no value: the default
            defaults[param.name] = checked_value(ctx, param, value, f"{key} in {source}")
    ctx.default_map = {**(ctx.default_map or {}), **defaults}


def config_keys(command: click.Command) -> dict[str, click.Option]:
    """Key -> option of every option ``--config`` can set: each long flag without its dashes
    (``--max-tokens`` -> ``max-tokens``; not the ``--no-...`` side of a boolean flag)."""
    return {opt[2:]: param for param in command.params
            if isinstance(param, click.Option) and param.expose_value
            for opt in param.opts if opt.startswith("--")}


def suggestion(key: str, options: dict) -> str:
    """`` (did you mean 'max-tokens'?)`` for the option name closest to ``key``, or ``""``."""
    import difflib
    close = difflib.get_close_matches(key.replace("_", "-"), list(options), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def checked_value(ctx: click.Context, param: click.Parameter, value: object, where: str):
    """``value`` converted and checked as the option's flag would be (its type and callback);
    click's ``BadParameter`` naming the option and ``where`` if it does not fit. A YAML float
    or boolean is not taken for an integer option (click would truncate it)."""
    hint = f"'{param.opts[-1]}' ({where})"
    if isinstance(param.type, click.types.IntParamType) \
            and (isinstance(value, bool) or isinstance(value, float)):
        raise click.BadParameter(f"{value!r} is not an integer", ctx=ctx, param_hint=hint)
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


def plain_value(value: object) -> object:
    """``value`` as YAML writes it safely: a path as its absolute string, a tuple as a list."""
    from pathlib import Path
    if isinstance(value, Path):
        return str(value.resolve())
    if isinstance(value, tuple):
        return [plain_value(v) for v in value]
    return value

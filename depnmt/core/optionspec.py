"""What an option is, without a command line: a dataclass field with its help text, the values
it takes and a check, read by the configuration (:mod:`depnmt.training.config`), the schemes'
options (:mod:`depnmt.model.schemes.options`) and the command layer, which turns each field
into a flag (:mod:`depnmt.commands.fields`)::

    @dataclass
    class ShawOptions:
        rel_k: int = option(2, "rel: maximum relative distance k (Eq. 15)", IntRange(min=0))

A field's name is its flag (``rel_k`` -> ``--rel-k``) and its key in the saved files. The
value kinds (:class:`Choice`, :class:`IntRange`, :class:`FloatRange`) say what a flag accepts;
a ``check`` is a function ``value -> value`` that raises ``ValueError`` with a message for a
value of the right type but a wrong form (``--gps-layer 0``)."""

from __future__ import annotations

import math
import os
from dataclasses import MISSING, Field, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Callable


@dataclass(frozen=True)
class Choice:
    """One of ``choices``."""

    choices: tuple[str, ...]

    def __init__(self, choices):
        object.__setattr__(self, "choices", tuple(choices))


@dataclass(frozen=True)
class IntRange:
    """An integer in ``[min, max]`` (None: unbounded)."""

    min: int | None = None
    max: int | None = None


@dataclass(frozen=True)
class FloatRange:
    """A number in the range from ``min`` to ``max`` (None: unbounded; ``*_open``: the bound
    itself excluded)."""

    min: float | None = None
    max: float | None = None
    min_open: bool = False
    max_open: bool = False


@dataclass(frozen=True)
class Folder:
    """A folder's path (a :class:`~pathlib.Path`, or with ``text`` the string given; it need
    not exist yet unless ``exists``)."""

    exists: bool = False
    text: bool = False


@dataclass(frozen=True)
class File:
    """A file's path (not a folder, unless ``or_folder``; it must exist if ``exists``), as a
    :class:`~pathlib.Path` or, with ``text``, as the string given."""

    exists: bool = False
    text: bool = False
    or_folder: bool = False


@dataclass(frozen=True)
class OnlyWith:
    """Where an option takes effect: when the option ``name`` (a field of the same settings)
    has one of ``values``, or, with no values, when it is given (not None). An option given
    (not at its default) where it takes no effect is refused by :func:`check_options`, on the
    command line and from Python alike: accepted, it would change nothing while the run
    seemed to use it."""

    name: str
    values: tuple[str, ...] = ()

    def __init__(self, name: str, *values: str):
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "values", values)

    def holds(self, settings: Any) -> bool:
        """Whether the option takes effect with ``settings`` (a dataclass instance)."""
        value = getattr(settings, self.name)
        return value in self.values if self.values else value is not None


@dataclass(frozen=True)
class Processes:
    """A number of worker processes ≥ 1, or ``auto`` (the cores this process may use)."""


Kind = Any  # Choice | IntRange | FloatRange | Folder | File | Processes | a Python type
#             (str, int, float, bool) | a tuple of kinds (an option of several values) | None

POSITIVE = IntRange(min=1)
COUNT = IntRange(min=0)                         # 0 usually means "off" or "no limit"
AMOUNT = FloatRange(min=0)
RATE = FloatRange(min=0, min_open=True)         # a learning rate
DROPOUT = FloatRange(0, 1, max_open=True)       # dropout, label smoothing: 1 leaves nothing
SEED = IntRange(0, 2**32 - 1)                   # what every random generator accepts
# the arithmetic of the matrix multiplies (train, translate, rescore: depnmt.core.device)
PRECISION = Choice(("auto", "fp32", "bf16", "fp16"))


def option(default: Any, help: str, type: Kind = None, check: Callable[[Any], Any] | None = None,
           flag: str | tuple[str, ...] | None = None, envvar: str | None = None,
           only: OnlyWith | None = None, **shown: Any) -> Any:
    """A dataclass field that is also an option: ``help`` its help text, ``type`` the values it
    takes (None: the type of ``default``), ``check`` a further check of a value, ``flag`` its
    flag when not the field's name (``--heads``; a boolean's ``--amp/--no-amp``; several:
    ``("-o", "--output")``), ``envvar`` an environment variable that sets its value when no
    flag gives it, ``only`` where it takes effect (:class:`OnlyWith`: elsewhere it is refused).
    ``shown``: how the flag is given and shown (:data:`SHOWN`: ``metavar``,
    ``required``, ``multiple``, ``nargs``, ``show_default``, ``hidden``). A function
    ``default`` (no arguments) gives the default when it is needed: the dataclass's default
    factory, and the flag's dynamic default (``$DEPNMT_MODEL``, read when the command runs)."""
    unknown = set(shown) - set(SHOWN)
    if unknown:
        raise TypeError(f"option(): unknown {', '.join(sorted(unknown))}")
    metadata = {"help": help, "type": type, "check": check, "flag": flag, "envvar": envvar,
                "only": only, **shown}
    if callable(default):
        return field(default_factory=default, metadata=metadata)
    return field(default=default, metadata=metadata)


def jobs_option(work: str) -> Any:
    """The ``jobs`` field of a data stage that does ``work`` in N processes (``--jobs N``)."""
    return option(1, f"{work} in N worker processes (auto: one per core this process may "
                  f"use). The output is the same for every N, byte for byte, and N is not "
                  f"recorded in the manifest.", Processes(), show_default=True,
                  metavar="N|auto")


# how a flag is given and shown, besides its value kind: Param's fields of these names
SHOWN = ("metavar", "required", "multiple", "nargs", "show_default", "hidden")


@dataclass(frozen=True)
class Param:
    """One option of a command, as the configuration sees it: ``name`` its parameter name (the
    key of a run's parameters, e.g. ``train_max_tokens``), ``flags`` its flags (``-i``,
    ``--input``; a boolean's ``--amp/--no-amp``), ``kind`` the values it takes (``bool``: an
    on/off flag), ``show_default`` None to follow the command's setting (a string: what the
    help says instead of the value), ``multiple`` given several times (its value a tuple),
    ``nargs`` values a flag takes."""

    name: str
    flags: tuple[str, ...]
    default: Any = None
    help: str = ""
    kind: Kind = None
    check: Callable[[Any], Any] | None = None
    envvar: str | None = None
    required: bool = False
    metavar: str | None = None
    hidden: bool = False
    show_default: bool | str | None = None
    multiple: bool = False
    nargs: int = 1

    @property
    def keys(self) -> list[str]:
        """Its keys in a ``--config`` file: each long flag without its dashes (``max-tokens``;
        not the ``--no-...`` side of a boolean)."""
        return [f.split("/")[0][2:] for f in self.flags if f.startswith("--")]


def field_param(f: Field, prefix: str = "", **extra: Any) -> Param:
    """The :class:`Param` of an :func:`option` field, named ``prefix`` + the field's name;
    ``extra``: Param fields that override the field's own (``show_default=True``)."""
    meta = f.metadata
    default = f.default if f.default is not MISSING else (
        None if f.default_factory is MISSING else f.default_factory)
    flags = meta.get("flag") or flag_name(f.name)
    shown = {key: meta[key] for key in SHOWN if key in meta}
    return Param(prefix + f.name, (flags,) if isinstance(flags, str) else tuple(flags), default,
                 meta["help"], bool if isinstance(default, bool) else meta.get("type"),
                 meta.get("check"), meta.get("envvar"), **{**shown, **extra})


def field_params(cls: type, prefix: str = "", **extra: Any) -> list[Param]:
    """The :class:`Param` of each field of the dataclass ``cls`` that has help (an option)."""
    return [field_param(f, prefix, **extra) for f in option_fields(cls)]


def option_fields(cls: type) -> list[Field]:
    """The fields of the dataclass ``cls`` that are options (:func:`option`), in order."""
    return [f for f in fields(cls) if "help" in f.metadata and not is_learned(f)]


def from_options(cls: type, values: dict[str, Any], **others: Any) -> Any:
    """The ``cls`` (a dataclass of :func:`option` fields) of a command's parameters ``values``
    (name -> value; each option field's value is taken from there), and ``others``."""
    return cls(**{f.name: values[f.name] for f in option_fields(cls)}, **others)


def check_options(settings: Any) -> None:
    """Check each option field of the dataclass instance ``settings`` as its flag would be
    (:func:`convert`; None: not given, not checked); a :class:`~depnmt.core.errors.DepnmtError`
    ``NAME VALUE: what is wrong`` (the API's keyword, its value) otherwise. The values stay as
    they are."""
    from depnmt.core.errors import DepnmtError
    for f in option_fields(type(settings)):
        value = getattr(settings, f.name)
        if value is None or value == ():
            continue
        try:
            check_value(field_param(f), value)
        except ValueError as exc:
            raise DepnmtError(f"{f.name} {value!r}: {exc}") from None
    check_effect(settings)


def check_effect(settings: Any) -> None:
    """A :class:`~depnmt.core.errors.DepnmtError` naming the first option of ``settings`` that
    is given (not its default, None or empty) where it takes no effect (its :class:`OnlyWith`
    does not hold): ``--conllu-dir takes effect only with --backend conllu, not --backend
    spacy``."""
    from depnmt.core.errors import DepnmtError
    by_name = {f.name: f for f in option_fields(type(settings))}
    for f in by_name.values():
        only, value = f.metadata.get("only"), getattr(settings, f.name)
        if only is None or value in (None, ()) or value == _default(f) or only.holds(settings):
            continue
        needed = _long_flag(by_name[only.name])
        wanted = " or ".join(f"{needed} {v}" for v in only.values) if only.values else needed
        now = getattr(settings, only.name)
        given = f", not {needed} {now}" if only.values and now is not None else ""
        raise DepnmtError(f"{_long_flag(f)} takes effect only with {wanted}{given}: leave it "
                          f"out, or give {wanted}")


def _default(f: Field) -> Any:
    return f.default if f.default is not MISSING else (
        None if f.default_factory is MISSING else f.default_factory())


def _long_flag(f: Field) -> str:
    """The field's long flag (``--conllu-dir``)."""
    return next(flag.split("/")[0] for flag in field_param(f).flags if flag.startswith("--"))


def check_value(param: Param, value: Any) -> None:
    """A ValueError when ``value`` is not what ``param``'s flag takes: one value, or for a
    ``multiple`` or ``nargs`` option each of its values (each part of a tuple of kinds), then
    the option's ``check`` of the whole, as its click callback sees it."""
    if not (param.multiple or param.nargs > 1):
        convert(param, value)
        return
    kinds = param.kind if isinstance(param.kind, tuple) else None
    one = replace(param, multiple=False, nargs=1, default=None, check=None,
                  kind=None if kinds else param.kind)
    for each in (value if param.multiple else [value]):
        if kinds is None:
            convert(one, each)
        elif not isinstance(each, (list, tuple)) or len(each) != len(kinds):
            raise ValueError(f"expected {len(kinds)} values, not {each!r}.")
        else:
            for kind, part in zip(kinds, each):
                convert(replace(one, kind=kind), part)
    if param.check:
        param.check(value)


def learned(help: str) -> Any:
    """A field the scheme learns from the training data (no flag; None until learned)."""
    return field(default=None, metadata={"help": help, "learned": True})


def is_learned(f: Field) -> bool:
    return bool(f.metadata.get("learned"))


def flag_name(name: str) -> str:
    """``rel_k`` -> ``--rel-k``."""
    return "--" + name.replace("_", "-")


# -- values of a settings file or a dict, checked as a flag's ------------------------------------
TRUE = {"1", "true", "t", "yes", "y", "on"}
FALSE = {"0", "false", "f", "no", "n", "off", ""}


def convert(param: Param, value: Any) -> Any:
    """``value`` (from YAML or Python) as ``param``'s flag would take it: converted to its kind
    and checked; a ValueError saying what is wrong, worded as the command line words it."""
    kind = param.kind
    if isinstance(value, (list, dict)) and not isinstance(param.default, (list, tuple, dict)) \
            and not param.multiple:
        # said without the value: a YAML alias bomb prints to gigabytes
        raise ValueError(f"{'a list' if isinstance(value, list) else 'a mapping'} where one "
                         f"value belongs.")
    if kind is None and param.default is not None:
        kind = type(param.default)
    if isinstance(kind, (IntRange, FloatRange)):
        return number_in_range(kind, value)
    if kind in (int, float):
        return _number(kind, value)
    if isinstance(kind, Choice):
        if value not in kind.choices:
            raise ValueError(f"{value!r} is not one of {', '.join(map(repr, kind.choices))}.")
    elif kind is bool:
        value = _boolean(value)
    elif isinstance(kind, (Folder, File)):
        value = _path(kind, value)
    elif isinstance(kind, Processes):
        from depnmt.core.errors import DepnmtError
        from depnmt.core.workers import resolve_jobs
        try:
            value = resolve_jobs(value)
        except DepnmtError:
            raise ValueError(f"{value!r} is not a number of processes (1, 2, ...) or "
                             f"'auto'") from None
    elif not isinstance(value, (list, dict)) and value is not None:
        value = str(value)
    return param.check(value) if param.check else value


EMPTY_PATH = "an empty path (an unset shell variable?); '.' is the current folder."


def _path(kind: Folder | File, value: Any) -> Path | str:
    """``value`` as the path ``kind`` takes, in click's words when it does not."""
    folder = isinstance(kind, Folder)
    if not isinstance(value, (str, os.PathLike)):
        raise ValueError(f"expected a {'folder' if folder else 'file'}'s path, not "
                         f"{type(value).__name__} {value!r}.")
    path, name = Path(value), os.fspath(value)          # "" is no folder (Path("") is ".")
    if name == "":
        raise ValueError(EMPTY_PATH)
    if folder and os.path.isfile(name):
        raise ValueError(f"Directory {str(path)!r} is a file.")
    if not folder and not kind.or_folder and os.path.isdir(name):
        raise ValueError(f"File {str(path)!r} is a directory.")
    if kind.exists and not os.path.exists(name):
        raise ValueError(f"{'Directory' if folder else 'File'} {str(path)!r} does not "
                         f"exist.")
    return str(value) if kind.text else path


def number_in_range(kind: IntRange | FloatRange, value: Any) -> int | float:
    """``value`` as a number of ``kind`` (an int for an :class:`IntRange`; finite) within its
    bounds, as :func:`convert` takes it; a ValueError saying what is wrong otherwise."""
    return _in_range(kind, _number(kind, value))


def _number(kind: Kind, value: Any) -> int | float:
    integer = kind is int or isinstance(kind, IntRange)
    what = ("integer" if integer else "float") + (" range" if kind not in (int, float) else "")
    if integer and isinstance(value, (bool, float)):
        raise ValueError(f"{value!r} is not an integer")
    try:
        number = int(value) if integer else float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{value!r} is not a valid {what}.") from None
    if not math.isfinite(number):
        raise ValueError(f"{value!r} is not a finite number.")
    return number


def _in_range(kind: IntRange | FloatRange, value: int | float) -> int | float:
    low_open = getattr(kind, "min_open", False)
    high_open = getattr(kind, "max_open", False)
    below = kind.min is not None and (value <= kind.min if low_open else value < kind.min)
    above = kind.max is not None and (value >= kind.max if high_open else value > kind.max)
    if below or above:
        lower, upper = ("<" if low_open else "<="), ("<" if high_open else "<=")
        if kind.max is None:
            bounds = f"x{'>' if low_open else '>='}{kind.min}"
        elif kind.min is None:
            bounds = f"x{upper}{kind.max}"
        else:
            bounds = f"{kind.min}{lower}x{upper}{kind.max}"
        raise ValueError(f"{value} is not in the range {bounds}.")
    return value


def _boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in TRUE | FALSE:
        return text in TRUE
    raise ValueError(f"{value!r} is not a valid boolean. Recognized values: "
                     f"{', '.join(sorted(TRUE | FALSE))}")


def plain_value(value: object) -> object:
    """``value`` as YAML writes it safely: a path as its absolute string, a tuple as a list."""
    if isinstance(value, Path):
        return str(value.resolve())
    if isinstance(value, tuple):
        return [plain_value(v) for v in value]
    return value


def suggestion(key: str, options) -> str:
    """`` (did you mean 'max-tokens'?)`` for the option name closest to ``key``, or ``""``."""
    import difflib
    close = difflib.get_close_matches(key.replace("_", "-"), list(options), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


class ConfigFile(dict):
    """The mapping of a YAML options file, with the line (from 1) of each of its keys,
    ``lines`` (:func:`config_where` names it in errors)."""

    def __init__(self, data: dict, lines: dict[str, int]):
        super().__init__(data)
        self.lines = lines


def config_where(values: object, key: object, source: str) -> str:
    """``FILE:LINE`` of ``key`` when ``values`` is a :class:`ConfigFile` that knows its line,
    else ``source``."""
    line = (getattr(values, "lines", None) or {}).get(str(key))
    return f"{source}:{line}" if line else source


def key_lines(text: str, path: str) -> dict[str, int]:
    """The line of each top-level key of the YAML mapping ``text`` (of the file ``path``); a
    key given twice is a DepnmtError naming both lines (YAML loaders keep the last value and
    drop the first without a word)."""
    import yaml

    from depnmt.core.errors import DepnmtError
    node = yaml.compose(text, Loader=yaml.SafeLoader)     # nodes only: nothing is constructed
    lines: dict[str, int] = {}
    for key, _ in (node.value if isinstance(node, yaml.MappingNode) else []):
        line = key.start_mark.line + 1
        if str(key.value) in lines:
            raise DepnmtError(f"{path}:{line}: option '{key.value}' is given twice (also at "
                              f"line {lines[str(key.value)]})")
        lines[str(key.value)] = line
    return lines


def read_yaml_config(path: str) -> dict:
    """The mapping in the YAML file ``path`` (an empty file: ``{}``), as a :class:`ConfigFile`
    that knows the line of each key; a DepnmtError naming the file (and line) when it is not
    valid YAML, not a mapping, or gives a key twice."""
    import yaml

    from depnmt.core.errors import DepnmtError
    from depnmt.core.textio import read_lines
    text = "\n".join(read_lines(path))
    try:
        data = yaml.safe_load(text)
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
    return ConfigFile(data, key_lines(text, path))

"""The search options, declared once: :class:`SearchConfig` (a model's search settings,
``config.json``'s ``search``) has one field per option, with its default, the values it takes
and its help (:func:`search_option`). From these fields come ``translate``'s and ``rescore``'s
flags and ``train``'s search defaults (:func:`search_params`), the search keywords of
:class:`depnmt.Translator` (:func:`search_names`), the JSON types ``config.json``'s ``search``
section is checked against (:func:`search_json_types`) and the checks of a setting's value
(:meth:`SearchConfig.__post_init__`); so adding a search option is adding a field. No torch
here, so that ``depnmt translate --help`` stays quick.

A beam or a length limit beyond the bounds only runs out of memory or time; the length limit
``a · |source| + b`` is in target subwords. What the settings mean:
:mod:`depnmt.decoding.search`."""

from __future__ import annotations

from dataclasses import MISSING, Field, dataclass, field, fields
from typing import Any

from depnmt.core.errors import DepnmtError
from depnmt.core.optionspec import (Choice, FloatRange, IntRange, Kind, Param, convert, flag_name,
                                    number_in_range)

MAX_BEAM, MAX_ALPHA, MAX_LEN_A, MAX_LEN_B = 1024, 100.0, 100.0, 100_000
BEAM = IntRange(1, MAX_BEAM)
ALPHA = FloatRange(0, MAX_ALPHA)
LEN_A = FloatRange(0, MAX_LEN_A)
LEN_B = IntRange(0, MAX_LEN_B)
LENGTH_PENALTIES = ("gnmt", "power")
AT_LIMIT = ("eos", "cut")
COMMANDS = ("translate", "rescore", "train")      # the commands that take search options


def search_option(default: Any, help: str, kind: Kind, *, train: str | None = None,
                  rescore: str | None = None, metavar: str | None = None) -> Any:
    """A field of :class:`SearchConfig` that is a search option: ``default`` its value when
    neither the model nor the caller sets it, ``kind`` the values it takes
    (:mod:`depnmt.core.optionspec`), ``help`` the help of ``translate``'s flag (which defaults to
    the model's setting); ``train``: the help of the ``train`` flag that records the model's
    setting (None: train has none), ``rescore``: the help of ``rescore``'s flag (None: none);
    ``metavar`` the flag's value in the help. The flag is the field's name (``max_len_a`` ->
    ``--max-len-a``)."""
    return field(default=default, metadata={"help": help, "type": kind, "train": train,
                                            "rescore": rescore, "metavar": metavar})


@dataclass
class SearchConfig:
    """A model's search settings (``config.json``'s ``search``; the defaults of translate,
    rescore and the API, which each call may override). The field order is the positional
    order of the constructor."""

    beam: int = search_option(4, "beam size (1 = greedy)", BEAM,
                              train="default beam size of translate (1 = greedy)")
    alpha: float = search_option(
        0.6, "length penalty exponent: hypotheses are ranked by log p / lp(|Y|), lp of "
        "--length-penalty, |Y| in target subwords (0: plain log-probability)", ALPHA,
        train="default length penalty exponent alpha of translate",
        rescore="length penalty exponent of the score (0: score = logprob)")
    max_len_a: float = search_option(
        1.5, "output length limit: a translation has at most ceil(A × source subwords + B) − 1 "
        "target subwords (the limit counts the end-of-sentence token; source subwords without "
        "it)", LEN_A, metavar="A")
    max_len_b: int = search_option(10, "the B of --max-len-a's limit, in target subwords",
                                   LEN_B, metavar="B")
    at_limit: str = search_option(
        "eos", "beam search at the length limit: eos = only EOS may follow there and it is "
        "scored (fairseq), cut = the best hypotheses end as they are (OpenNMT-py, CTranslate2; "
        "what --ct2 always does)", Choice(AT_LIMIT))
    length_penalty: str = search_option(
        "gnmt", "form of lp(|Y|), |Y| the target subwords scored (EOS included): gnmt = "
        "((5 + |Y|) / 6)^alpha (Wu et al. 2016), power = |Y|^alpha (CTranslate2, fairseq, "
        "Marian; what --ct2 always does)", Choice(LENGTH_PENALTIES),
        train="default length penalty form of translate: gnmt = ((5 + |Y|) / 6)^alpha, "
              "power = |Y|^alpha (CTranslate2's)",
        rescore="form of lp(tokens): gnmt = ((5 + tokens) / 6)^alpha, power = tokens^alpha")

    def __post_init__(self):
        for f in search_fields(type(self)):
            check_setting(f, getattr(self, f.name))


def search_fields(cls: type | None = None) -> list[Field]:
    """The search options' fields (of ``cls``; default :class:`SearchConfig`), in order."""
    return [f for f in fields(cls or SearchConfig) if "help" in f.metadata]


def search_names() -> tuple[str, ...]:
    """The search options' names: the keywords of :class:`depnmt.Translator`, the keys of
    ``config.json``'s ``search``."""
    return tuple(f.name for f in search_fields())


def search_config(**settings: Any) -> SearchConfig:
    """The :class:`SearchConfig` of ``settings`` (name -> value, each checked), the defaults
    for the others."""
    return SearchConfig(**settings)


def check_setting(f: Field, value: Any) -> Any:
    """``value`` when the search option ``f`` takes it (its kind's bounds or choices; not
    converted), else a :class:`DepnmtError` ``NAME VALUE: what is wrong``."""
    kind = f.metadata["type"]
    if isinstance(kind, Choice):
        if value not in kind.choices:
            raise DepnmtError(f"{f.name} {value!r}: expected one of {', '.join(kind.choices)}")
        return value
    try:
        if isinstance(kind, (IntRange, FloatRange)):
            number_in_range(kind, value)
        else:
            convert(field_param(f), value)
    except ValueError as exc:
        raise DepnmtError(f"{f.name} {value!r}: {exc}") from None
    return value


def check_length_penalty(value: str) -> str:
    """``value`` when it names a length penalty (:data:`LENGTH_PENALTIES`), else a
    :class:`DepnmtError`."""
    return check_setting(_field("length_penalty"), value)


def check_at_limit(value: str) -> str:
    """``value`` when it is an ``at_limit`` (:data:`AT_LIMIT`), else a :class:`DepnmtError`."""
    return check_setting(_field("at_limit"), value)


def _field(name: str) -> Field:
    return next(f for f in fields(SearchConfig) if f.name == name)


# -- what the fields give: flags, config.json's types ---------------------------------------------
def field_param(f: Field, command: str = "translate") -> Param:
    """The :class:`Param` of the search option ``f`` in ``command`` (:data:`COMMANDS`):
    ``train``'s is named ``search_`` + the field's name and defaults to the field's default,
    with train's help; ``translate``'s and ``rescore``'s default to the model's setting (None)."""
    meta = f.metadata
    if command == "train":
        return Param("search_" + f.name, (flag_name(f.name),), f.default, meta["train"],
                     meta["type"], metavar=meta["metavar"], show_default=True)
    return Param(f.name, (flag_name(f.name),), None, meta.get(command) or meta["help"],
                 meta["type"], metavar=meta["metavar"], show_default=model_default(f))


def model_default(f: Field) -> str:
    """What a search flag's help says its default is: the model's setting, and where that
    comes from (train's flag) or what it is when the model has none."""
    if f.metadata["train"]:
        return f"the model's, set by train {flag_name(f.name)}"
    default = None if f.default is MISSING else f.default
    return f"the model's, else {default}"


def search_params(command: str) -> list[Param]:
    """The search options ``command`` (:data:`COMMANDS`) takes, in declaration order:
    translate every one, train and rescore those with help of their own."""
    if command not in COMMANDS:
        raise ValueError(f"no search options in {command!r}; one of {', '.join(COMMANDS)}")
    return [field_param(f, command) for f in search_fields()
            if command == "translate" or f.metadata[command]]


def json_type(kind: Kind) -> type | tuple[type, ...]:
    """The JSON type(s) of a value of ``kind`` in ``config.json`` (a number may be an int)."""
    if isinstance(kind, FloatRange) or kind is float:
        return (int, float)
    if isinstance(kind, IntRange) or kind is int:
        return int
    if isinstance(kind, Choice) or kind is str:
        return str
    return kind


def search_json_types() -> dict[str, type | tuple[type, ...]]:
    """``config.json``'s ``search`` section: each option's name and JSON type."""
    return {f.name: json_type(f.metadata["type"]) for f in search_fields()}

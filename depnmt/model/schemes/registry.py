"""The scheme registry (fairseq's ``register_model_architecture`` idea, without the
machinery): every positional scheme by its component name, the options each declares, and the
steps that turn a model config's ``schemes`` entries into schemes (:func:`build_schemes`,
:func:`check_schemes`, :func:`learn_options`). What a scheme *name* means is
:mod:`depnmt.model.schemes.names`; old saved configs are upgraded by
:mod:`depnmt.model.schemes.upgrade`."""

from __future__ import annotations

import importlib
from dataclasses import Field, fields
from typing import Any

from depnmt.core.compat import renamed_options
from depnmt.model.schemes.base import ModelDims, Scheme
from depnmt.model.schemes.options import is_learned, make_options, options_dict, pick_options

SCHEMES: dict[str, type[Scheme]] = {}
# option name -> (its declaration, the first scheme declaring it): one meaning per name
OPTION_FIELDS: dict[str, tuple[Field, str]] = {}
# Components that a paper combines jointly rather than by adding their terms: when all the
# parts are listed, they become the joint component (registered by the scheme modules).
FUSIONS: dict[tuple[str, ...], str] = {}

BUILTIN_MODULES = ("absolute", "relative", "dbsa", "gps", "pascal", "structural", "treedist",
                   "factors")


def register(cls: type[Scheme]) -> type[Scheme]:
    """Class decorator: make a scheme selectable by its ``name``. A name taken by another
    scheme, or an option name another scheme declares differently (not the same field of a
    shared options class), is an error here, when the scheme module is imported."""
    if SCHEMES.get(cls.name, cls) is not cls:
        raise TypeError(f"scheme name {cls.name!r} is registered twice")
    for f in fields(cls.Options):
        first = OPTION_FIELDS.get(f.name, (f, cls.name))
        if first[0] is not f:
            raise TypeError(f"scheme {cls.name!r} declares option {f.name!r}, which scheme "
                            f"{first[1]!r} declares differently: options with one name must "
                            f"be one field of a shared options class")
    for f in fields(cls.Options):
        OPTION_FIELDS.setdefault(f.name, (f, cls.name))
    SCHEMES[cls.name] = cls
    return cls


def load_builtin_schemes() -> None:
    for mod in BUILTIN_MODULES:
        importlib.import_module(f"depnmt.model.schemes.{mod}")


def scheme_entries(names: list[str], values: dict[str, Any]) -> list[dict[str, Any]]:
    """The model config's ``schemes``: ``[{"name", "options"}]`` for the components ``names``,
    each with the options its ``Options`` declares, taken from ``values`` (e.g. every flag of
    ``depnmt train``; absent or None: the default)."""
    load_builtin_schemes()
    values = renamed_options(values)
    return [{"name": n, "options": options_dict(pick_options(SCHEMES[n].Options, values))}
            for n in names]


def build_schemes(entries: list[dict[str, Any]]) -> list[Scheme]:
    """Instantiate the schemes of a model config's ``schemes`` entries."""
    load_builtin_schemes()
    return [SCHEMES[e["name"]](**e["options"]) for e in entries]


def check_schemes(entries: list[dict[str, Any]], dims: ModelDims) -> list[Scheme]:
    """Every scheme's :meth:`Scheme.check` (before any data is loaded); returns the schemes
    built for it (for :func:`learn_options`)."""
    schemes = build_schemes(entries)
    for scheme in schemes:
        scheme.check(dims)
    return schemes


def learn_options(entries: list[dict[str, Any]], examples: Any,
                  schemes: list[Scheme] | None = None) -> list[dict[str, Any]]:
    """The step between loading the training data and building the model: ``entries`` with
    the options each scheme learns from the training ``examples``' source trees added, e.g.
    GPS's label vocabulary (:meth:`Scheme.learn_options`); ``examples``: a list of examples
    with trees attached, or a corpus that hands out its trees as word tables
    (``source_tables()``, :class:`depnmt.data.cache.TrainCorpus`). ``schemes``: those of
    ``entries`` when already built (:func:`check_schemes`), given the learned options too,
    so that the model is built from them (one build per run)."""
    from depnmt.core.wordtable import WordTable
    schemes = build_schemes(entries) if schemes is None else schemes
    tables = (examples.source_tables() if hasattr(examples, "source_tables")
              else [WordTable.from_trees(ex.src_tree for ex in examples)])
    learned = []
    for e, scheme in zip(entries, schemes):
        options = {**e["options"], **scheme.learn_options(tables)}
        scheme.options = make_options(scheme.Options, options)   # the built scheme learns too
        learned.append({"name": e["name"], "options": options})
    return learned


def with_learned(entries: list[dict[str, Any]],
                 saved: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``--resume``: ``entries`` with the learned options of the saved model's scheme of the
    same name where they hold none (so the resumed model is the saved one)."""
    learned_fields = {n: [f.name for f in fields(SCHEMES[n].Options) if is_learned(f)]
                      for n in {e["name"] for e in entries}}
    kept = {e["name"]: e["options"] for e in saved}
    return [{"name": e["name"], "options": {
        **e["options"], **{k: kept[e["name"]][k] for k in learned_fields[e["name"]]
                           if e["options"].get(k) is None and k in kept.get(e["name"], {})}}}
        for e in entries]


def declared_options() -> dict[str, list[str]]:
    """Every option name a flag sets -> the schemes that use it (registration order)."""
    load_builtin_schemes()
    users: dict[str, list[str]] = {}
    for name, cls in SCHEMES.items():
        for f in fields(cls.Options):
            if not is_learned(f):
                users.setdefault(f.name, []).append(name)
    return users

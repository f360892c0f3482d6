"""Scheme registry and presets (fairseq's ``register_model_architecture`` idea, without the machinery).

``--scheme`` takes a preset name or components joined by ``+`` (e.g. ``abs+dep+rel``); a scheme
module registers itself with :func:`register` and is imported by :func:`load_builtin_schemes`.
"""

from __future__ import annotations

import importlib
from dataclasses import Field, fields
from typing import Any

import click

from ...errors import DepnmtError
from .base import ModelDims, Scheme
from .options import click_option, is_learned, options_dict, pick_options

SCHEMES: dict[str, type[Scheme]] = {}
# option name -> (its declaration, the first scheme declaring it): one meaning per name
OPTION_FIELDS: dict[str, tuple[Field, str]] = {}

# Paper system names -> components (more are added by the scheme modules of later issues).
PRESETS: dict[str, list[str]] = {
    "Transformer_abs": ["abs"],
    # Omote et al. 2019 (RANLP) §5: every system keeps the absolute PE (Table 3 removes it).
    "Transformer_rel": ["abs", "rel"],
    "Transformer_dep": ["abs", "dep"],
    "Transformer_dep+rel": ["abs", "dep", "rel"],
    # The Japanese paper (Omote et al. 2019, NLP): method 1 (提案手法1) and method 2 (提案手法2).
    "Transformer_deplabel": ["abs", "deplabel"],
    "Transformer_deplabel+rel": ["abs", "deplabel_rel"],
    # Deguchi et al. 2019 Table 2: dependency-based self-attention in the encoder, the decoder
    # or both ("Trans. + DBSA(Enc)" ...); combinable with any scheme, e.g. abs+dep+rel+dbsa_enc.
    "Transformer_abs+DBSA(Enc)": ["abs", "dbsa_enc"],
    "Transformer_abs+DBSA(Dec)": ["abs", "dbsa_dec"],
    "Transformer_abs+DBSA(Enc)+DBSA(Dec)": ["abs", "dbsa_enc", "dbsa_dec"],
    # The GPS paper's Table 2 (Transformer = Transformer_abs): PASCAL (Bugliarello & Okazaki
    # 2020), Structure Position (Wang et al. 2019) and Ours (GPS), each on the sequential PE.
    "Transformer_pascal": ["abs", "pascal"],
    "Transformer_structural": ["abs", "structural"],
    "Transformer_gps": ["abs", "gps"],
    # issue 13's proof that a scheme is one module plus a registry line (treedist.py)
    "Transformer_treedist": ["abs", "treedist"],
    # Sennrich & Haddow 2016: linguistic input features (factors.py)
    "Transformer_factors": ["abs", "factors"],
}

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


def resolve(spec: str) -> list[str]:
    """``"Transformer_abs"`` or ``"abs+rel"`` -> component names, validated."""
    load_builtin_schemes()
    names = PRESETS.get(spec) or _fuse([p.strip() for p in spec.split("+") if p.strip()])
    unknown = [n for n in names if n not in SCHEMES]
    if unknown or not names:
        choices = ", ".join(sorted(SCHEMES) + sorted(PRESETS))
        raise DepnmtError(f"unknown positional scheme '{spec}'; choose from: {choices} "
                          f"(components may be joined with '+')")
    if "none" in names and len(names) > 1:
        raise DepnmtError("scheme 'none' cannot be combined with other schemes")
    return names


def _fuse(names: list[str]) -> list[str]:
    """Replace the parts of each fusion by the joint component, where the first part was."""
    for parts, joint in FUSIONS.items():
        if all(p in names for p in parts):
            names = [joint if n == parts[0] else n for n in names if n not in parts[1:]]
    return names


def scheme_entries(names: list[str], values: dict[str, Any]) -> list[dict[str, Any]]:
    """The model config's ``schemes``: ``[{"name", "options"}]`` for the components ``names``,
    each with the options its ``Options`` declares, taken from ``values`` (e.g. every flag of
    ``depnmt train``; absent or None: the default)."""
    load_builtin_schemes()
    return [{"name": n, "options": options_dict(pick_options(SCHEMES[n].Options, values))}
            for n in names]


def build_schemes(entries: list[dict[str, Any]]) -> list[Scheme]:
    """Instantiate the schemes of a model config's ``schemes`` entries."""
    load_builtin_schemes()
    return [SCHEMES[e["name"]](**e["options"]) for e in entries]


def check_schemes(entries: list[dict[str, Any]], dims: ModelDims) -> None:
    """Every scheme's :meth:`Scheme.check` (before any data is loaded)."""
    for scheme in build_schemes(entries):
        scheme.check(dims)


def learn_options(entries: list[dict[str, Any]], examples: list[Any]) -> list[dict[str, Any]]:
    """The step between loading the training data and building the model: ``entries`` with
    the options each scheme learns from the training ``examples`` (trees attached) added, e.g.
    GPS's label vocabulary (:meth:`Scheme.learn_options`)."""
    return [{"name": e["name"], "options": {**e["options"], **scheme.learn_options(examples)}}
            for e, scheme in zip(entries, build_schemes(entries))]


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


def upgrade_model_config(model: dict[str, Any]) -> dict[str, Any]:
    """A model config of ``config_format`` 1 (``scheme`` names and one flat ``scheme_options``
    bag of every scheme's options) in today's form (``schemes: [{name, options}]``, each with
    the options it declares; an option the model was saved without takes its default)."""
    if "schemes" in model or "scheme" not in model:
        return model
    load_builtin_schemes()
    unknown = [n for n in model["scheme"] if n not in SCHEMES]
    if unknown:
        raise DepnmtError(f"unknown positional scheme(s) {', '.join(map(str, unknown))} in the "
                          f"model config")
    out = {k: v for k, v in model.items() if k not in ("scheme", "scheme_options")}
    out["schemes"] = scheme_entries(list(model["scheme"]), model.get("scheme_options") or {})
    return out


def declared_options() -> dict[str, list[str]]:
    """Every option name a flag sets -> the schemes that use it (registration order)."""
    load_builtin_schemes()
    users: dict[str, list[str]] = {}
    for name, cls in SCHEMES.items():
        for f in fields(cls.Options):
            if not is_learned(f):
                users.setdefault(f.name, []).append(name)
    return users


def all_cli_options() -> list[click.Option]:
    """Every registered scheme's ``depnmt train`` flags, one per declared option."""
    users = declared_options()
    return [click_option(OPTION_FIELDS[name][0]) for name in users]


def scheme_list() -> str:
    """``train --help``'s list of components, one line each: name and ``Scheme.help``."""
    load_builtin_schemes()
    return "\n".join(f"  {name:<12} {cls.help}" for name, cls in SCHEMES.items())

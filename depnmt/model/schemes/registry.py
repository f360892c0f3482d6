"""Scheme registry and scheme names (fairseq's ``register_model_architecture`` idea, without
the machinery).

A scheme *name* (``depnmt train --scheme``, the recipes' systems, ``depnmt inspect --scheme``,
``depnmt report``) is parts joined by ``+`` that always say whether the model keeps the
sinusoidal absolute PE: ``abs+dep+rel`` keeps it, ``noabs+dep`` drops it, ``noabs`` alone has
no positions at all. A part is a component (a registered :class:`Scheme`, spelled with ``-``:
``dbsa-enc``) or a *variant*, a component with option values (``gps-all``, ``lisa``; the flags
given on the command line win over them). :func:`parse_name` turns a name into components and
options; the 0.1.0 spellings (the ``Transformer_*`` presets, component lists without ``abs``,
``dbsa_enc``, ``none``) still work for this release with one warning each and exactly their 0.1.0
meaning (:data:`OLD_PRESETS`, :data:`OLD_PARTS`, :data:`OLD_DEFAULTS`). The model config keeps
the component names (``dbsa_enc``), which are storage, not spellings: models of every version
load without a warning (:func:`upgrade_model_config`).
"""

from __future__ import annotations

import importlib
import re
from dataclasses import Field, dataclass, field, fields
from typing import Any, Callable

import click

from ...errors import DepnmtError
from .base import ModelDims, Scheme, check_old_layer_list, one_based_layers
from .options import click_option, flag_name, is_learned, options_dict, pick_options

SCHEMES: dict[str, type[Scheme]] = {}
# option name -> (its declaration, the first scheme declaring it): one meaning per name
OPTION_FIELDS: dict[str, tuple[Field, str]] = {}

ABS, NOABS = "abs", "noabs"
NO_POSITIONS = "none"                   # the component of ``noabs`` alone
NAME_CHARACTERS = re.compile(r"[A-Za-z0-9+._-]+")   # no shell quoting needed

# Variants: a part that is a component with option values (recipe systems of the papers'
# ablations and baselines). ``gps-layerN`` (N from 1) is one more, by pattern (:func:`_part`).
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    # Omote et al. 2019 (RANLP) Table 3: b^V only / b^K only
    "dep-bV": ("dep", {"dep_terms": "value"}),
    "dep-bK": ("dep", {"dep_terms": "key"}),
    # the GPS paper's Table 3: the syntax term in every encoder layer
    "gps-all": ("gps", {"gps_layer": "all"}),
    # LISA (Strubell et al. 2018) as the PASCAL fork runs it for MT: a deep bi-affine parse head
    # in the bottom encoder layer
    "lisa": ("dbsa_enc", {"dbsa_enc_layer": 1, "dbsa_scorer": "deep"}),
    # Sennrich & Haddow 2016 with the feature embeddings concatenated instead of summed
    "factors-concat": ("factors", {"factor_combine": "concat"}),
}
GPS_LAYER = re.compile(r"gps-layer([1-9][0-9]*)")

# Components that a paper combines jointly rather than by adding their terms: when all the
# parts are listed, they become the joint component (registered by the scheme modules).
FUSIONS: dict[tuple[str, ...], str] = {}

# -- the 0.1.0 spellings (deprecated: they go in 0.3.0) ----------------------------------------
# 0.1.0 presets -> the name they are now
OLD_PRESETS: dict[str, str] = {
    "Transformer_abs": "abs",
    "Transformer_rel": "abs+rel",
    "Transformer_dep": "abs+dep",
    "Transformer_dep+rel": "abs+dep+rel",
    "Transformer_deplabel": "abs+deplabel",
    "Transformer_deplabel+rel": "abs+deplabel+rel",
    "Transformer_abs+DBSA(Enc)": "abs+dbsa-enc",
    "Transformer_abs+DBSA(Dec)": "abs+dbsa-dec",
    "Transformer_abs+DBSA(Enc)+DBSA(Dec)": "abs+dbsa-enc+dbsa-dec",
    "Transformer_pascal": "abs+pascal",
    "Transformer_structural": "abs+structural",
    "Transformer_gps": "abs+gps",
    "Transformer_treedist": "abs+treedist",
    "Transformer_factors": "abs+factors",
}
# 0.1.0 component spellings -> their part today (``none`` alone is ``noabs``)
OLD_PARTS: dict[str, str] = {"dbsa_enc": "dbsa-enc", "dbsa_dec": "dbsa-dec",
                             "deplabel_rel": "deplabel+rel", NO_POSITIONS: NOABS}
# 0.1.0 defaults that changed: every 0.1.0 spelling of a scheme that declares the option keeps
# its 0.1.0 value (unless the flag is given), and so does a saved model lacking the option
OLD_DEFAULTS: dict[str, Any] = {"dbsa_chain_head": "first"}
# 0.1.0 options that changed meaning get a new name: old name -> (new name, old value -> new)
RENAMED_OPTIONS: dict[str, tuple[str, Callable[[str], str]]] = {
    "gps_layers": ("gps_layer", one_based_layers),
    "pascal_layers": ("pascal_layer", one_based_layers),
}
_WARNED: set[str] = set()


@dataclass
class SchemeName:
    """What a scheme name means: ``components`` (config.json names, fused), the ``options``
    its variants (or its 0.1.0 spelling) set, and ``canonical``, today's spelling (the name
    itself unless it is a 0.1.0 one)."""

    components: list[str]
    options: dict[str, Any] = field(default_factory=dict)
    canonical: str = ""


def deprecation(old: str, new: str) -> None:
    """``warning: OLD is deprecated; use NEW (the old spelling goes in 0.3.0)``, once per
    process and spelling."""
    from ...commands.options import deprecation_message
    from ...log import warn
    if old not in _WARNED:
        _WARNED.add(old)
        warn(deprecation_message(old, new))


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
    """A scheme name (``"abs+dep+rel"``; a 0.1.0 spelling warns) -> component names."""
    return parse_name(spec).components


def parse_name(spec: str) -> SchemeName:
    """What the scheme name ``spec`` means (:class:`SchemeName`); a 0.1.0 spelling gets one
    deprecation warning and its 0.1.0 meaning; an unknown name is a DepnmtError listing the
    parts."""
    load_builtin_schemes()
    spec = str(spec).strip()
    if spec in OLD_PRESETS:
        name = parse_name(OLD_PRESETS[spec])
        return _deprecated(spec, name.canonical, name.components, name.options)
    parts = [p.strip() for p in spec.split("+") if p.strip()]
    if not parts:
        raise _unknown(spec)
    marks = [p for p in parts if p in (ABS, NOABS)]
    if not marks or any(p in OLD_PARTS for p in parts):
        return _old_components(spec, parts)
    if NOABS in marks and len(marks) > 1:
        raise DepnmtError(f"scheme '{spec}': give abs (keep the absolute PE) or noabs (drop "
                          f"it) once")
    components: list[str] = []
    options: dict[str, Any] = {}
    for part in parts:
        if part == NOABS:
            continue
        component, values = _part(spec, part)
        components.append(component)
        options.update(values)
    return SchemeName(_fuse(components) or [NO_POSITIONS], options, spec)


def _part(spec: str, part: str) -> tuple[str, dict[str, Any]]:
    """One part of a name -> (component, the options it sets)."""
    layer = GPS_LAYER.fullmatch(part)
    if layer:
        return "gps", {"gps_layer": layer.group(1)}
    if part in VARIANTS:
        return VARIANTS[part]
    component = part.replace("-", "_")
    if part not in OLD_PARTS and component in SCHEMES and component != NO_POSITIONS:
        return component, {}
    raise _unknown(spec)


def _old_components(spec: str, parts: list[str]) -> SchemeName:
    """A 0.1.0 component list (``dep+rel``, ``abs+dbsa_enc``; no ``abs``: no absolute PE),
    with its 0.1.0 meaning and a deprecation warning naming today's spelling."""
    components = _fuse(parts)
    unknown = [n for n in components if n not in SCHEMES]
    if unknown and all(p in part_names() or GPS_LAYER.fullmatch(p) for p in parts):
        raise DepnmtError(f"scheme '{spec}' does not say whether the absolute PE is kept: "
                          f"abs+{spec} keeps it, noabs+{spec} drops it")
    if unknown:
        raise _unknown(spec)
    if NO_POSITIONS in components and len(components) > 1:
        raise DepnmtError("scheme 'none' cannot be combined with other schemes")
    new = [OLD_PARTS.get(p, p.replace("_", "-")) for p in parts]
    canonical = "+".join(new if ABS in parts or new == [NOABS] else [NOABS] + new)
    return _deprecated(spec, canonical, components, {})


def _deprecated(spec: str, canonical: str, components: list[str],
                options: dict[str, Any]) -> SchemeName:
    """The 0.1.0 spelling ``spec`` of ``canonical``, after its warning: 0.1.0's defaults of the
    options the components declare come with it (:data:`OLD_DEFAULTS`)."""
    if spec != canonical:
        deprecation(spec, canonical)
    declared = {f.name for n in components for f in fields(SCHEMES[n].Options)}
    old = {k: v for k, v in OLD_DEFAULTS.items() if k in declared}
    return SchemeName(components, {**old, **options}, canonical)


def _unknown(spec: str) -> DepnmtError:
    return DepnmtError(f"unknown positional scheme '{spec}': a scheme is abs (keep the absolute "
                       f"PE) or noabs (drop it) joined by '+' with parts from: "
                       f"{', '.join(part_names())} (e.g. abs+dep+rel, noabs+dep)")


def _fuse(names: list[str]) -> list[str]:
    """Replace the parts of each fusion by the joint component, where the first part was."""
    for parts, joint in FUSIONS.items():
        if all(p in names for p in parts):
            names = [joint if n == parts[0] else n for n in names if n not in parts[1:]]
    return names


def scheme_name(entries: list[dict[str, Any]]) -> str:
    """Today's name of a model config's ``schemes`` (components only: variants' options are
    the entries' options), e.g. ``abs+dbsa-enc`` or ``noabs+dep``."""
    parts = [OLD_PARTS.get(e["name"], e["name"].replace("_", "-")) for e in entries]
    if parts == [NOABS]:
        return NOABS
    return "+".join(parts if ABS in parts else [NOABS] + parts)


def renamed_options(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with each 0.1.0 option that changed meaning (:data:`RENAMED_OPTIONS`, e.g.
    0-based ``gps_layers``) given under its new name and value (1-based ``gps_layer``)."""
    out = dict(values)
    for old, (new, convert) in RENAMED_OPTIONS.items():
        value = out.pop(old, None)
        if value is not None:
            out[new] = convert(value)
    return out


def scheme_params(params: dict[str, Any], given: set[str]) -> tuple[dict[str, Any], set[str]]:
    """``depnmt train``'s parameters (and the names of those given) in today's terms: the
    scheme's name (a 0.1.0 spelling: warned, replaced by today's), the options its variants or
    0.1.0 spelling set where their flags are not given, and the 0.1.0 option flags
    (``--gps-layers``: warned) under their new names and values."""
    name = parse_name(params["scheme"])
    out = {**params, "scheme": name.canonical}
    out.update({k: v for k, v in name.options.items() if k not in given})
    given = set(given)
    for old, (new, convert) in RENAMED_OPTIONS.items():
        value = out.pop(old, None)
        if old in given and value is not None:
            if new in given:
                raise click.UsageError(f"{flag_name(old)} (0-based, the old spelling of "
                                       f"{flag_name(new)}) and {flag_name(new)} are the same "
                                       f"option: give {flag_name(new)} once")
            deprecation(f"{flag_name(old)} {value}", f"{flag_name(new)} {convert(value)}")
            out[new] = convert(value)
            given.add(new)
        given.discard(old)
    return out, given


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
    """A saved model config in today's form, the same model: ``config_format`` 1 (``scheme``
    names and one flat ``scheme_options`` bag of every scheme's options) becomes ``schemes:
    [{name, options}]``, each with the options it declares; in every entry a 0.1.0 option that
    changed meaning is given under its new name (0-based ``gps_layers`` -> 1-based
    ``gps_layer``, :data:`RENAMED_OPTIONS`) and an option saved without its value takes its
    0.1.0 default (:data:`OLD_DEFAULTS`), else today's. Silent: loading is not a spelling."""
    load_builtin_schemes()
    if "schemes" not in model and "scheme" in model:
        unknown = [n for n in model["scheme"] if n not in SCHEMES]
        if unknown:
            raise DepnmtError(f"unknown positional scheme(s) {', '.join(map(str, unknown))} in "
                              f"the model config")
        model = {**{k: v for k, v in model.items() if k not in ("scheme", "scheme_options")},
                 "schemes": [{"name": n, "options": model.get("scheme_options") or {}}
                             for n in model["scheme"]]}
    if not isinstance(model.get("schemes"), list):
        return model
    return {**model, "schemes": [_saved_entry(e) for e in model["schemes"]]}


def _saved_entry(entry: Any) -> Any:
    """One saved ``{name, options}`` entry in today's option names, with the options it
    declares (missing ones: 0.1.0's default where that changed, else today's)."""
    if not isinstance(entry, dict) or entry.get("name") not in SCHEMES \
            or not isinstance(entry.get("options"), dict):
        return entry
    cls = SCHEMES[entry["name"]]
    values = {**OLD_DEFAULTS, **renamed_options(entry["options"])}
    return {**entry, "options": options_dict(pick_options(cls.Options, values))}


def saved_scheme_values(model: dict[str, Any]) -> dict[str, Any]:
    """``train --resume``: a saved model config's scheme as ``depnmt train`` parameters:
    ``scheme`` (today's name, :func:`scheme_name`) and every scheme option's saved value."""
    schemes = upgrade_model_config(model)["schemes"]
    return {"scheme": scheme_name(schemes),
            **{k: v for s in schemes for k, v in s["options"].items()}}


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
    """Every registered scheme's ``depnmt train`` flags, one per declared option, and the
    hidden 0.1.0 flags of :data:`RENAMED_OPTIONS` (``--gps-layers``: 0-based)."""
    users = declared_options()
    old = [click.Option([flag_name(name)], default=None, hidden=True,
                        callback=check_old_layer_list,
                        help=f"0.1.0 spelling of {flag_name(new)}, 0-based (deprecated)")
           for name, (new, _) in RENAMED_OPTIONS.items()]
    return [click_option(OPTION_FIELDS[name][0]) for name in users] + old


def part_names() -> list[str]:
    """The parts a scheme name joins (besides abs / noabs), components first, then variants."""
    load_builtin_schemes()
    return [n.replace("_", "-") for n in SCHEMES if n not in (ABS, NO_POSITIONS)
            and n not in FUSIONS.values()] + ["+".join(p) for p in FUSIONS] + list(VARIANTS) \
        + ["gps-layerN"]


def scheme_list() -> str:
    """``train --help``'s list of parts, one line each: name and what it is."""
    load_builtin_schemes()
    lines = [(ABS, SCHEMES[ABS].help),
             (NOABS, "without abs; alone: no positional information at all (ablations)")]
    lines += [(n.replace("_", "-"), cls.help) for n, cls in SCHEMES.items()
              if n not in (ABS, NO_POSITIONS) and n not in FUSIONS.values()]
    lines += [("+".join(parts), SCHEMES[joint].help) for parts, joint in FUSIONS.items()]
    lines += [(n, f"{c.replace('_', '-')} with " + ", ".join(f"{flag_name(k)} {v}"
                                                            for k, v in o.items()))
              for n, (c, o) in VARIANTS.items()]
    lines += [("gps-layerN", "gps with --gps-layer N (N from 1)")]
    return "\n".join(f"  {name:<14} {text}" for name, text in lines)


SCHEME_HELP = ("positional scheme: abs (keep the absolute PE) or noabs (drop it) and parts "
               "joined by '+', e.g. abs+dep+rel, abs+dbsa-enc, abs+gps-all, noabs+dep (the "
               "parts: see above)")

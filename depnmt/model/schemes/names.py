"""Scheme names: what ``depnmt train --scheme`` (the recipes' systems, ``depnmt inspect
--scheme``, ``depnmt report``) means.

A scheme *name* is parts joined by ``+`` that always say whether the model keeps the
sinusoidal absolute PE: ``abs+dep+rel`` keeps it, ``noabs+dep`` drops it, ``noabs`` alone has
no positions at all. A part is a component (a registered :class:`~depnmt.model.schemes.base.Scheme`,
spelled with ``-``: ``dbsa-enc``) or a *variant*, a component with option values (``gps-all``,
``lisa``; the flags given on the command line win over them). :func:`parse_name` turns a name
into components and options; the 0.1.0 spellings (:mod:`depnmt.core.compat`: the ``Transformer_*``
presets, component lists without ``abs``, ``dbsa_enc``, ``none``) still work for this release
with one warning each and exactly their 0.1.0 meaning. The model config keeps the component
names (``dbsa_enc``), which are storage, not spellings: models of every version load without a
warning (:func:`depnmt.model.schemes.upgrade.upgrade_model_config`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from typing import Any

from depnmt.core.compat import OLD_DEFAULTS, OLD_PARTS, OLD_PRESETS, deprecation
from depnmt.core.errors import DepnmtError
from depnmt.core.schemename import ABS, NOABS
from depnmt.model.schemes.registry import FUSIONS, SCHEMES, load_builtin_schemes

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


@dataclass
class SchemeName:
    """What a scheme name means: ``components`` (config.json names, fused), the ``options``
    its variants (or its 0.1.0 spelling) set, and ``canonical``, today's spelling (the name
    itself unless it is a 0.1.0 one)."""

    components: list[str]
    options: dict[str, Any] = field(default_factory=dict)
    canonical: str = ""


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


def part_names() -> list[str]:
    """The parts a scheme name joins (besides abs / noabs), components first, then variants."""
    load_builtin_schemes()
    return [n.replace("_", "-") for n in SCHEMES if n not in (ABS, NO_POSITIONS)
            and n not in FUSIONS.values()] + ["+".join(p) for p in FUSIONS] + list(VARIANTS) \
        + ["gps-layerN"]

"""Scheme registry and presets (fairseq's ``register_model_architecture`` idea, without the machinery).

``--scheme`` takes a preset name or components joined by ``+`` (e.g. ``abs+dep+rel``); a scheme
module registers itself with :func:`register` and is imported by :func:`load_builtin_schemes`.
"""

from __future__ import annotations

import importlib
from typing import Any

from ...errors import DepnmtError
from .base import Scheme

SCHEMES: dict[str, type[Scheme]] = {}

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
}

# Components that a paper combines jointly rather than by adding their terms: when all the
# parts are listed, they become the joint component (registered by the scheme modules).
FUSIONS: dict[tuple[str, ...], str] = {}

BUILTIN_MODULES = ("absolute", "relative", "dbsa", "gps", "pascal", "structural")


def register(cls: type[Scheme]) -> type[Scheme]:
    """Class decorator: make a scheme selectable by its ``name``."""
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


def build_schemes(names: list[str], options: dict[str, Any]) -> list[Scheme]:
    """Instantiate components with the (shared) scheme options recorded in the model config."""
    load_builtin_schemes()
    return [SCHEMES[n](**options) for n in names]


def all_cli_options() -> list:
    """Every registered scheme's train flags (added to ``depnmt train``)."""
    load_builtin_schemes()
    seen, opts = set(), []
    for cls in SCHEMES.values():
        for opt in cls.cli_options():
            if opt.name not in seen:
                seen.add(opt.name)
                opts.append(opt)
    return opts

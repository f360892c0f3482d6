"""0.1.0 compatibility, in one place: the old spellings that still work for this release with
one warning each (:func:`deprecation`) and the old saved settings that load silently.

- old flags of the commands (:data:`DEPRECATED`: ``--data``, ``--model-dir``, ...), which the
  command layer adds as hidden aliases and ``--config`` / ``train_model`` keys accept;
- old scheme names (:data:`OLD_PRESETS`: ``Transformer_dep``; :data:`OLD_PARTS`: ``dbsa_enc``,
  ``none``) and the 0.1.0 defaults that came with them (:data:`OLD_DEFAULTS`), read by
  :func:`depnmt.model.schemes.names.parse_name`;
- old scheme options that changed meaning (:data:`RENAMED_OPTIONS`: 0-based ``gps_layers``),
  given as flags, ``--config`` keys or in a saved model config
  (:func:`depnmt.model.schemes.upgrade.upgrade_model_config`).
"""

from __future__ import annotations

from typing import Any, Callable

from depnmt.core.errors import DepnmtError
from depnmt.core.layerlists import LAYER_LIST, layer_numbers

REMOVED_IN = "0.3.0"
_WARNED: set[str] = set()

# -- the commands' renamed options -------------------------------------------------------------
# command ("analyze awsl" for a subcommand) -> {old flag: the option it now is, as help shows
# it}. Each old flag is a hidden option of that command that sets the same parameter and warns
# once (:func:`deprecated_aliases`); a --config key spelled the old way (a 0.1.0 train.yaml's
# `data:`) works and warns too. The one table of them: the tests run every entry.
DEPRECATED: dict[str, dict[str, str]] = {
    "prepare": {"--out-dir": "-o/--output"},
    "bpe": {"--out-dir": "-o/--output"},
    "multitask": {"--out-dir": "-o/--output"},
    "train": {"--data": "-i/--input", "--model-dir": "-o/--output"},
    "average": {"--model-dir": "-m/--model", "--name": "-o/--output"},
    "translate": {"--model-dir": "-m/--model"},
    "export": {"--model-dir": "-m/--model"},
    "score": {"-m": "--metrics", "-t": "--tokenize"},
    "report": {"-t": "--tokenize", "--out": "-o/--output"},
    "archive": {"--out": "-o/--output"},
    "plot": {"-l": "--label"},
    "analyze awsl": {"--model-dir": "-m/--model", "--src": "-i/--input",
                     "--out": "-o/--output"},
}


def deprecation_message(old: str, new: str) -> str:
    """The warning (without ``warning:``) for the old spelling ``old`` of ``new``."""
    return f"{old} is deprecated; use {new} (the old spelling goes in {REMOVED_IN})"


def deprecation(old: str, new: str) -> None:
    """``warning: OLD is deprecated; use NEW (the old spelling goes in 0.3.0)``, once per
    process and spelling."""
    from depnmt.core.log import warn
    if old not in _WARNED:
        _WARNED.add(old)
        warn(deprecation_message(old, new))


# -- scheme names and options ------------------------------------------------------------------
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
                             "deplabel_rel": "deplabel+rel", "none": "noabs"}
# 0.1.0 defaults that changed: every 0.1.0 spelling of a scheme that declares the option keeps
# its 0.1.0 value (unless the flag is given), and so does a saved model lacking the option
OLD_DEFAULTS: dict[str, Any] = {"dbsa_chain_head": "first"}
OLD_LAYER_LIST_FORMAT = "'all' or 0-based layer numbers joined by ',' (e.g. 0 or 0,1,2)"


def one_based_layers(spec: str) -> str:
    """A 0.1.0 (0-based) layer list in today's 1-based spelling: ``"0,2"`` -> ``"1,3"``,
    ``"all"`` unchanged."""
    spec = str(spec).strip()
    if not LAYER_LIST.fullmatch(spec):
        raise DepnmtError(f"layer list '{spec}' must be {OLD_LAYER_LIST_FORMAT}")
    return spec if spec == "all" else ",".join(str(n + 1) for n in layer_numbers(spec))


def check_old_layer_list(value: Any) -> Any:
    """The check of the 0.1.0 flags ``--gps-layers`` / ``--pascal-layers`` (0-based)."""
    if value is not None and not LAYER_LIST.fullmatch(str(value)):
        raise ValueError(f"'{value}': expected {OLD_LAYER_LIST_FORMAT}")
    return value


# 0.1.0 options that changed meaning get a new name: old name -> (new name, old value -> new)
RENAMED_OPTIONS: dict[str, tuple[str, Callable[[str], str]]] = {
    "gps_layers": ("gps_layer", one_based_layers),
    "pascal_layers": ("pascal_layer", one_based_layers),
}


def renamed_options(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with each 0.1.0 option that changed meaning (:data:`RENAMED_OPTIONS`, e.g.
    0-based ``gps_layers``) given under its new name and value (1-based ``gps_layer``)."""
    out = dict(values)
    for old, (new, convert) in RENAMED_OPTIONS.items():
        value = out.pop(old, None)
        if value is not None:
            out[new] = convert(value)
    return out

"""Saved model configs in today's form: a ``config.json`` (or a checkpoint's ``model_config``)
of any version read as the same model, silently (loading is not a spelling)."""

from __future__ import annotations

from typing import Any

from depnmt.core.compat import OLD_DEFAULTS, renamed_options
from depnmt.core.errors import DepnmtError
from depnmt.model.schemes.options import options_dict, pick_options
from depnmt.model.schemes.registry import SCHEMES, load_builtin_schemes


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

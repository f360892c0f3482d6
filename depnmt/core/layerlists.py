"""Layer lists: which encoder layers an option names (``--gps-layer 1,3``, ``--pascal-layer
all``), counted from 1 (the bottom layer)."""

from __future__ import annotations

import re
from typing import Any

from depnmt.core.errors import DepnmtError

LAYER_LIST = re.compile(r"\s*(all|[0-9]+(\s*,\s*[0-9]+)*)\s*")
LAYER_LIST_FORMAT = ("'all' or layer numbers from 1 (the bottom layer) joined by ',' "
                     "(e.g. 1 or 1,2,3)")


def check_layer_list(value: Any) -> Any:
    """The check of ``--gps-layer`` / ``--pascal-layer``: the format, layers counted
    from 1 (the layer count is checked against the model by
    :meth:`~depnmt.model.schemes.base.Scheme.check`)."""
    if value is not None and not (LAYER_LIST.fullmatch(str(value))
                                  and 0 not in layer_numbers(str(value))):
        raise ValueError(f"'{value}': expected {LAYER_LIST_FORMAT}")
    return value


def layer_numbers(spec: str) -> list[int]:
    """The layer numbers of a well-formed list (none for ``all``)."""
    return [] if spec.strip() == "all" else [int(part) for part in spec.split(",")]


def parse_layers(spec: str, n_layers: int, flag: str = "layer list") -> list[int]:
    """``"1"``, ``"1,3"`` or ``"all"`` (layers counted from 1 = the bottom encoder layer) ->
    sorted 0-based indices of the encoder layers (DepnmtError naming ``flag`` if malformed or
    out of range)."""
    spec = str(spec).strip()
    if not LAYER_LIST.fullmatch(spec):
        raise DepnmtError(f"{flag} '{spec}' must be {LAYER_LIST_FORMAT}")
    if spec == "all":
        return list(range(n_layers))
    layers = sorted(set(layer_numbers(spec)))
    if any(not 1 <= layer <= n_layers for layer in layers):
        raise DepnmtError(f"{flag} '{spec}': layers are numbered 1..{n_layers} (1 = the "
                          f"bottom encoder layer) for a {n_layers}-layer encoder")
    return [layer - 1 for layer in layers]

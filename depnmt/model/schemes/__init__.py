"""Positional schemes: one module per family, registered by name (see ``base.py``)."""

from depnmt.model.schemes.base import (Extras, ModelDims, Scheme, SchemeModule, SchemeStack,
                                       pad_features)
from depnmt.model.schemes.names import parse_name, resolve
from depnmt.model.schemes.registry import SCHEMES, build_schemes

__all__ = ["Extras", "ModelDims", "Scheme", "SchemeModule", "SchemeStack", "pad_features",
           "SCHEMES", "build_schemes", "parse_name", "resolve"]

"""Positional schemes: one module per family, registered by name (see ``base.py``)."""

from .base import Extras, ModelDims, Scheme, SchemeModule, SchemeStack, pad_features
from .registry import SCHEMES, build_schemes, parse_name, resolve

__all__ = ["Extras", "ModelDims", "Scheme", "SchemeModule", "SchemeStack", "pad_features",
           "SCHEMES", "build_schemes", "parse_name", "resolve"]

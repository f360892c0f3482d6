"""Positional schemes: one module per family, registered by name (see ``base.py``)."""

from .base import Extras, ModelDims, Scheme, SchemeModule, SchemeStack, pad_features
from .registry import PRESETS, SCHEMES, build_schemes, resolve

__all__ = ["Extras", "ModelDims", "Scheme", "SchemeModule", "SchemeStack", "pad_features", "PRESETS",
           "SCHEMES", "build_schemes", "resolve"]

"""What a search can be asked for: the bounds of the search options, shared by ``translate``'s
flags, ``train``'s search defaults, ``config.json`` and the Python API (no torch here, so that
``depnmt translate --help`` stays quick). A beam or a length limit beyond them only runs out of
memory or time; the length limit ``a · |source| + b`` is in target subwords."""

from __future__ import annotations

from .optionspec import FloatRange, IntRange

MAX_BEAM, MAX_ALPHA, MAX_LEN_A, MAX_LEN_B = 1024, 100.0, 100.0, 100_000
BEAM = IntRange(1, MAX_BEAM)
ALPHA = FloatRange(0, MAX_ALPHA)
LEN_A = FloatRange(0, MAX_LEN_A)
LEN_B = IntRange(0, MAX_LEN_B)

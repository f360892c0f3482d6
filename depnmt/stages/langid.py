"""Language identification for ``prepare --langid-filter`` (offline, py3langid).

The GPS paper (§4.1) removes the WMT16 training pairs whose source is not in the source language,
following Bugliarello and Okazaki (2020). This module answers "is this line in language L?"
with py3langid (a maintained fork of langid.py, Lui and Baldwin 2012: a naive-Bayes model over
byte n-grams, shipped inside the wheel: 140 languages in 0.4, no network), choosing among all of its
languages. Language codes are ISO 639-1, as depnmt's (``en``, ``de``, ``ja``, ...).

    pip install 'depnmt[langid]'
"""

from __future__ import annotations

import functools
from typing import Callable

from depnmt.core.errors import DepnmtError


@functools.lru_cache(maxsize=1)
def _classify() -> Callable[[str], tuple[str, float]]:
    try:
        import py3langid
    except ImportError:
        raise DepnmtError("--langid-filter needs py3langid (an offline language identifier): "
                          "pip install 'depnmt[langid]'") from None
    return py3langid.classify


def known_languages() -> set[str]:
    """The ISO 639-1 codes py3langid can answer."""
    _classify()
    from py3langid import langid
    return set(langid._get_identifier().nb_classes)   # the model's labels (py3langid 0.2–0.4)


def check_language(lang: str) -> None:
    """A :class:`DepnmtError` when ``lang`` is not one of py3langid's languages."""
    if lang not in known_languages():
        raise DepnmtError(f"--langid-filter: py3langid does not know language '{lang}' (it knows "
                          f"{len(known_languages())} ISO 639-1 codes, e.g. en, de, ja)")


def identify(text: str) -> str:
    """The most probable language of ``text`` (an ISO 639-1 code)."""
    return _classify()(text)[0]


def version() -> str:
    from importlib.metadata import version as v
    return f"py3langid {v('py3langid')}"

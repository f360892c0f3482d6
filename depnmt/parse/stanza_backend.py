"""The stanza backend: UD trees from stanza's neural pipeline, in pretokenized mode.

stanza is given our tokens (``tokenize_pretokenized=True``: one sentence per line, no multiword
expansion), so its words are exactly ours. Models are never downloaded implicitly: they are read
from the resources folder (the ``resources_dir`` setting, else ``$STANZA_RESOURCES_DIR``, else
stanza's default ``~/stanza_resources``); when they are missing the error says how to get them.
"""

from __future__ import annotations

import os
from typing import Any

from ..errors import DepnmtError
from . import Parser
from .conllu import Sentence

PROCESSORS = "tokenize,pos,lemma,depparse"


def default_resources_dir() -> str:
    """``$STANZA_RESOURCES_DIR`` or stanza's default folder."""
    env = os.environ.get("STANZA_RESOURCES_DIR")
    if env:
        return env
    try:
        from stanza.resources.common import DEFAULT_MODEL_DIR
    except ImportError:  # pragma: no cover - stanza is a dependency
        return os.path.expanduser("~/stanza_resources")
    return DEFAULT_MODEL_DIR


def missing_models_message(lang: str, folder: str) -> str:
    """The one-line error for models that are not in ``folder``."""
    return (f"stanza models for '{lang}' not found in {folder}; download them once with: "
            f"python -c \"import stanza; stanza.download('{lang}', model_dir='{folder}')\"")


def load_pipeline(lang: str, package: str | None, folder: str) -> Any:
    """A stanza pipeline reading models from ``folder`` only; DepnmtError when they are missing."""
    try:
        import stanza
    except ImportError:
        raise DepnmtError("the stanza backend needs stanza: pip install stanza") from None
    try:
        return stanza.Pipeline(lang, dir=folder, package=package or "default",
                               processors=PROCESSORS, tokenize_pretokenized=True,
                               download_method=None, logging_level="WARN", use_gpu=False)
    except FileNotFoundError:
        raise DepnmtError(missing_models_message(lang, folder)) from None
    except ValueError as exc:  # language or package not listed in the folder's resources.json
        raise DepnmtError(f"{missing_models_message(lang, folder)} ({exc})") from None


def sentence_from_stanza(sentence: Any) -> Sentence:
    """A stanza ``Sentence`` (its syntactic words) as our Sentence (sent_ids all 0)."""
    words = sentence.words
    return Sentence([w.text for w in words], [int(w.head or 0) for w in words],
                    [w.deprel or "dep" for w in words], [w.upos or "X" for w in words],
                    [0] * len(words))


class StanzaParser(Parser):
    """Parse pretokenized lines with stanza; see the module docstring."""

    def __init__(self, lang: str | None, model: str | None = None,
                 resources_dir: str | None = None):
        if not lang:
            raise DepnmtError("the stanza backend needs a language code (e.g. 'en', 'de', 'ja')")
        self.settings = {"backend": "stanza", "lang": lang, "model": model,
                         "resources_dir": resources_dir}
        self.pipeline = load_pipeline(lang, model, resources_dir or default_resources_dir())

    def describe(self) -> str:
        return f"stanza {self.settings['lang']} ({self.settings['model'] or 'default'} package)"

    def analyse(self, batch: list[list[str]]) -> list[Sentence]:
        doc = self.pipeline(batch)
        return [sentence_from_stanza(s) for s in doc.sentences]

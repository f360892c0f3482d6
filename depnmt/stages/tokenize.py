"""Tokenizers: everything ``prepare`` does to one raw line, reusable by ``translate``.

A tokenizer is built from a small JSON-serialisable config (``make_tokenizer(cfg)``; the config
of a built tokenizer is ``tok.config()``, which ``prepare`` stores in its manifest) and does, in
this order:

1. **Normalise** (:meth:`Tokenizer.normalise`): Unicode normal form (``NFKC`` for Japanese, so
   full-width digits and Latin letters and half-width katakana become their usual forms; ``NFC``
   for every other language), lone surrogates become U+FFFD, control characters (tabs included)
   and a byte-order mark become spaces, the ``moses`` kind also applies Moses punctuation
   normalisation, and finally runs of whitespace collapse to one space with none at either end.
2. **Tokenize** the normalised text (the kind's own method).
3. **Lowercase** the tokens if ``lowercase`` is set (after tokenizing, so Moses still sees the
   capitals it uses to decide sentence ends).

Kinds:

* ``moses``: sacremoses ``MosesPunctNormalizer`` + ``MosesTokenizer`` (``escape=False``: ``&``
  stays ``&``) for ``lang``; detokenized with ``MosesDetokenizer``.
* ``sudachi``: SudachiPy with ``sudachidict_core`` in split mode C, the tokenizer and mode that
  GiNZA's ``ja_ginza`` pipeline uses (``[nlp.tokenizer] split_mode = "C"`` in its config), so
  tokens agree with the Japanese parser. Whitespace is not a token. Detokenizing joins tokens
  without spaces.
* ``keep``: the input is already tokenized; tokens are the whitespace-separated pieces of the
  normalised line. Detokenizing uses Moses for English and German (``detok: "moses"``) and joins
  with single spaces otherwise (``detok: "spaces"``).

Every method accepts any string (empty, whitespace-only, control characters, U+FFFD, very long
input) and never raises; tokens are never empty and never contain whitespace.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from typing import Any, Sequence

from depnmt.core.errors import DepnmtError

KINDS = ("moses", "sudachi", "keep")
UNICODE_FORMS = ("NFKC", "NFC", "none")
KEEP_DETOK = ("moses", "spaces")
MOSES_DETOK_LANGS = ("en", "de")

_SURROGATE = re.compile("[\ud800-\udfff]")
_BOM = "\ufeff"


def default_kind(lang: str | None) -> str:
    """The tokenizer kind used when none is chosen: ``sudachi`` for Japanese, else ``moses``."""
    return "sudachi" if lang == "ja" else "moses"


def default_unicode_form(lang: str | None) -> str:
    """``NFKC`` for Japanese, ``NFC`` for every other language."""
    return "NFKC" if lang == "ja" else "NFC"


def clean_text(text: str, form: str) -> str:
    """Unicode-normalise ``text`` and replace surrogates, control characters and BOMs (see above).

    Whitespace is not collapsed here (see :func:`collapse_whitespace`).
    """
    if form != "none":
        text = unicodedata.normalize(form, text)
    text = _SURROGATE.sub("\ufffd", text).replace(_BOM, " ")
    if text.isprintable():
        return text
    return "".join(" " if unicodedata.category(ch) == "Cc" else ch for ch in text)


def collapse_whitespace(text: str) -> str:
    """Collapse every run of Unicode whitespace to one space and strip both ends."""
    return " ".join(text.split())


def split_tokens(tokens: list[str]) -> list[str]:
    """Defensive clean-up of a tokenizer's output: no empty tokens, none containing whitespace."""
    return [piece for token in tokens for piece in token.split()]


class Tokenizer:
    """Base class: normalisation, lowercasing and config handling shared by every kind.

    Subclasses implement :meth:`_normalise_extra` (optional), :meth:`_split` and
    :meth:`detokenize`, and list their own config keys in :meth:`_own_config`.
    """

    kind = ""

    def __init__(self, lang: str | None = None, lowercase: bool = False,
                 unicode: str | None = None):
        self.lang = lang
        self.lowercase = bool(lowercase)
        self.unicode = unicode or default_unicode_form(lang)
        if self.unicode not in UNICODE_FORMS:
            raise DepnmtError(f"unknown Unicode normal form '{self.unicode}' in tokenizer config "
                              f"(choose from {', '.join(UNICODE_FORMS)})")

    # -- the pipeline ---------------------------------------------------------------------------
    def normalise(self, text: str) -> str:
        """The normalised, untokenized form of ``text`` (before lowercasing)."""
        return collapse_whitespace(self._normalise_extra(clean_text(text, self.unicode)))

    def process(self, text: str) -> tuple[str, list[str]]:
        """``(reference, tokens)`` for one raw line.

        ``reference`` is the normalised untokenized text (lowercased when ``lowercase`` is set),
        the form ``prepare`` writes to ``*.raw.*`` as BLEU reference.
        """
        normalised = self.normalise(text)
        tokens = split_tokens(self._split(normalised)) if normalised else []
        if self.lowercase:
            return normalised.lower(), [t.lower() for t in tokens]
        return normalised, tokens

    def tokenize(self, text: str) -> list[str]:
        """Normalise, tokenize and (optionally) lowercase one raw line."""
        return self.process(text)[1]

    def prepare_words(self, words: Sequence[str]) -> list[str]:
        """Words that are tokenized already (a CoNLL-U sentence's FORMs) made what ``prepare``
        makes of a token: each normalised (:meth:`normalise`) and lowercased when ``lowercase``
        is set, word for word — never split, joined or dropped, so a tree over ``words`` fits
        the result. A word whose normalisation is empty or holds a space keeps its own form
        (lowercased when set). Idempotent: ``prepare``'s own tokens come back unchanged."""
        out = []
        for word in words:
            form = self.normalise(word)
            form = word if not form or " " in form else form
            out.append(form.lower() if self.lowercase else form)
        return out

    def detokenize(self, tokens: list[str]) -> str:
        """Join tokens back into text (the inverse of tokenizing, as far as the kind allows)."""
        raise NotImplementedError

    def config(self) -> dict[str, Any]:
        """A JSON-serialisable config; ``make_tokenizer(tok.config())`` rebuilds this tokenizer."""
        return {"kind": self.kind, "lang": self.lang, "lowercase": self.lowercase,
                "unicode": self.unicode, **self._own_config()}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config()})"

    def __reduce__(self):
        """Pickled as its config (``prepare --jobs`` sends it to worker processes)."""
        return make_tokenizer, (self.config(),)

    # -- for subclasses -------------------------------------------------------------------------
    def _normalise_extra(self, text: str) -> str:
        """Kind-specific normalisation applied before whitespace is collapsed."""
        return text

    def _split(self, text: str) -> list[str]:
        """Tokenize normalised, non-empty text."""
        raise NotImplementedError

    def _own_config(self) -> dict[str, Any]:
        """Config keys specific to the kind."""
        return {}


@functools.lru_cache(maxsize=None)
def _moses_tools(lang: str):
    """Cached ``(normalizer, tokenizer, detokenizer)`` for ``lang`` (built once per process)."""
    from sacremoses import MosesDetokenizer, MosesPunctNormalizer, MosesTokenizer
    return MosesPunctNormalizer(lang), MosesTokenizer(lang), MosesDetokenizer(lang)


class MosesTokenizer(Tokenizer):
    """sacremoses punctuation normalisation, tokenization and detokenization for ``lang``."""

    kind = "moses"

    def __init__(self, lang: str | None = None, **kwargs: Any):
        if not lang:
            raise DepnmtError("the moses tokenizer needs a language (config key 'lang')")
        super().__init__(lang, **kwargs)
        # sacremoses is imported, and its tools built, at the first line (about 0.3 s of
        # compiling regular expressions): a translator that is given no input never pays it

    def _normalise_extra(self, text: str) -> str:
        return _moses_tools(self.lang)[0].normalize(text)

    def _split(self, text: str) -> list[str]:
        return _moses_tools(self.lang)[1].tokenize(text, escape=False)

    def detokenize(self, tokens: list[str]) -> str:
        return moses_detokenize(self.lang, tokens)


def moses_detokenize(lang: str, tokens: list[str]) -> str:
    """Moses detokenization of unescaped tokens."""
    return _moses_tools(lang)[2].detokenize(list(tokens), unescape=False)


# SudachiPy refuses input longer than this many UTF-8 bytes; longer text is cut into chunks.
SUDACHI_MAX_BYTES = 49149
_SUDACHI_CHUNK_CHARS = SUDACHI_MAX_BYTES // 4  # a character is at most 4 bytes in UTF-8


@functools.lru_cache(maxsize=None)
def _sudachi(dict_name: str, mode: str):
    """A cached SudachiPy tokenizer object (loading the dictionary takes a while)."""
    try:
        from sudachipy import Dictionary, SplitMode
        return Dictionary(dict=dict_name).create(mode=getattr(SplitMode, mode))
    except Exception as exc:  # missing package / dictionary: say how to fix it
        raise DepnmtError(f"cannot load the Sudachi dictionary '{dict_name}' ({exc}); install "
                          f"it with `pip install sudachipy sudachidict_{dict_name}`") from None


def chunk_text(text: str, max_chars: int = _SUDACHI_CHUNK_CHARS) -> list[str]:
    """Cut ``text`` into pieces of at most ``max_chars`` characters, at a space where possible."""
    chunks = []
    while len(text) > max_chars:
        cut = text.rfind(" ", 1, max_chars)
        cut = cut if cut > 0 else max_chars
        chunks.append(text[:cut])
        text = text[cut:]
    chunks.append(text)
    return chunks


class SudachiTokenizer(Tokenizer):
    """Japanese morphological segmentation with SudachiPy (GiNZA's tokenizer)."""

    kind = "sudachi"

    def __init__(self, lang: str | None = "ja", dict: str = "core", mode: str = "C",
                 **kwargs: Any):
        if mode not in ("A", "B", "C"):
            raise DepnmtError(f"unknown Sudachi split mode '{mode}' (choose A, B or C)")
        super().__init__(lang or "ja", **kwargs)
        self.dict_name = dict
        self.mode = mode
        self._tok = _sudachi(dict, mode)

    def _split(self, text: str) -> list[str]:
        pieces = [text] if len(text.encode("utf-8")) <= SUDACHI_MAX_BYTES else chunk_text(text)
        return [m.surface() for piece in pieces for m in self._tok.tokenize(piece)]

    def detokenize(self, tokens: list[str]) -> str:
        return "".join(tokens)

    def _own_config(self) -> dict[str, Any]:
        return {"dict": self.dict_name, "mode": self.mode}


class KeepTokenizer(Tokenizer):
    """Input that is already tokenized: tokens are the whitespace-separated pieces."""

    kind = "keep"

    def __init__(self, lang: str | None = None, detok: str | None = None, **kwargs: Any):
        super().__init__(lang, **kwargs)
        self.detok = detok or ("moses" if lang in MOSES_DETOK_LANGS else "spaces")
        if self.detok not in KEEP_DETOK:
            raise DepnmtError(f"unknown detokenizer '{self.detok}' for the keep tokenizer "
                              f"(choose from {', '.join(KEEP_DETOK)})")
        if self.detok == "moses" and not lang:
            raise DepnmtError("the keep tokenizer with detok 'moses' needs a language ('lang')")

    def process(self, text: str) -> tuple[str, list[str]]:
        """``(reference, tokens)``; the reference is the detokenized tokens (see ``prepare``)."""
        _, tokens = super().process(text)
        return self.detokenize(tokens), tokens

    def _split(self, text: str) -> list[str]:
        return text.split()

    def detokenize(self, tokens: list[str]) -> str:
        if self.detok == "moses":
            return moses_detokenize(self.lang, tokens)  # type: ignore[arg-type]
        return " ".join(tokens)

    def _own_config(self) -> dict[str, Any]:
        return {"detok": self.detok}


TOKENIZERS: dict[str, type[Tokenizer]] = {"moses": MosesTokenizer, "sudachi": SudachiTokenizer,
                                          "keep": KeepTokenizer}
COMMON_KEYS = ("lang", "lowercase", "unicode")
OWN_KEYS = {"moses": (), "sudachi": ("dict", "mode"), "keep": ("detok",)}


def make_tokenizer(cfg: dict[str, Any]) -> Tokenizer:
    """Build a tokenizer from a config such as ``{"kind": "moses", "lang": "en"}``.

    ``kind`` defaults to :func:`default_kind` of ``lang``; the other keys (``lowercase``,
    ``unicode`` and the kind's own: ``dict``/``mode`` for sudachi, ``detok`` for keep) have
    defaults. An unknown kind or key raises :class:`DepnmtError`.
    """
    cfg = dict(cfg)
    kind = cfg.pop("kind", None) or default_kind(cfg.get("lang"))
    if kind not in TOKENIZERS:
        raise DepnmtError(f"unknown tokenizer '{kind}' (choose from {', '.join(KINDS)})")
    allowed = COMMON_KEYS + OWN_KEYS[kind]
    unknown = sorted(set(cfg) - set(allowed))
    if unknown:
        raise DepnmtError(f"unknown key(s) {', '.join(unknown)} in a '{kind}' tokenizer config "
                          f"(allowed: kind, {', '.join(allowed)})")
    return TOKENIZERS[kind](**cfg)

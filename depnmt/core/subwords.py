"""The subword→word alignment, recovered from the subwords themselves (no file, no subword-nmt).

subword-nmt appends "@@" to every piece of a word except the last, so a word ends at each piece
without "@@" (:func:`word_spans`, :func:`word_index`, :func:`merge_subwords`). A token that itself
ends with "@@" (e.g. "C@@") would look like a continuation: the BPE stage escapes it by
appending "‡" before segmentation (:func:`escape_token`; a token ending in "@@‡…" gets one more
"‡", so the escape is reversible) and :func:`merge_subwords` removes it.

This module is the ground floor that the BPE stage (:mod:`depnmt.stages.bpe`), the tree projection
(:mod:`depnmt.core.trees`), the schemes and translate share.
"""

from __future__ import annotations

import re

SEPARATOR = "@@"
ESCAPE = "\u2021"  # "‡", appended to tokens that end with the separator

_NEEDS_ESCAPE = re.compile(re.escape(SEPARATOR) + ESCAPE + r"*\Z")
_ESCAPED = re.compile(re.escape(SEPARATOR) + ESCAPE + r"+\Z")


def escape_token(token: str) -> str:
    """``token`` with "‡" appended if it ends with "@@" (optionally followed by "‡"s)."""
    return token + ESCAPE if _NEEDS_ESCAPE.search(token) else token


def unescape_word(word: str) -> str:
    """Undo :func:`escape_token`."""
    return word[:-1] if _ESCAPED.search(word) else word


def word_spans(subwords: list[str]) -> list[tuple[int, int]]:
    """``(start, end)`` (end exclusive) of each word's subwords; a word ends at a piece without
    "@@".

    Trailing continuation pieces (a dangling "@@", e.g. in truncated model output) form a word.
    """
    spans, start = [], 0
    for i, piece in enumerate(subwords):
        if not piece.endswith(SEPARATOR):
            spans.append((start, i + 1))
            start = i + 1
    if start < len(subwords):
        spans.append((start, len(subwords)))
    return spans


def word_index(subwords: list[str]) -> list[int]:
    """For each subword, the index of the word it belongs to: the kept subword→word alignment."""
    return [w for w, (start, end) in enumerate(word_spans(subwords)) for _ in range(start, end)]


def merge_subwords(subwords: list[str]) -> list[str]:
    """The words of ``subwords`` (undo "@@ " and the "‡" escape): the de-BPE used by translate.

    A dangling final "@@" is stripped. Words that come out empty (only possible for bare "@@"
    pieces, which :class:`Segmenter` never produces) are dropped.
    """
    words = []
    for start, end in word_spans(subwords):
        text = "".join(p[:-len(SEPARATOR)] if p.endswith(SEPARATOR) else p
                       for p in subwords[start:end])
        if text:
            words.append(unescape_word(text))
    return words

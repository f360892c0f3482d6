"""Dependency parsing: one tree per tokenized line, over exactly that line's tokens.

``make_parser(settings)`` builds a reusable parser (models load once) from a settings dict::

    {"backend": "stanza", "lang": "en", "model": None, "resources_dir": None}
    {"backend": "spacy", "lang": "ja", "model": "ja_ginza", "retokenize": False}

``parser.parse(batch)`` takes a list of token lists and returns one
:class:`~depnmt.parse.conllu.Sentence` per item, with exactly the given tokens (an empty list gives
an empty Sentence). ``parser.settings`` is the dict to pass to ``make_parser`` again (the parse
stage stores it in its manifest; ``translate`` re-creates the parser from it). Settings with a
``control`` entry (a folder of ``depnmt controls``, :mod:`depnmt.parse.controls`) make a parser
whose trees are that control's trees of the backend's.
How several sentences or roots become one tree, and how a re-tokenizing backend's tree is
projected onto our tokens, is described in :mod:`depnmt.parse.projection`.

Importing this package is cheap: stanza and spaCy are imported when a parser is made.
"""

from __future__ import annotations

from typing import Any

from ..errors import DepnmtError
from .conllu import Sentence, read_conllu, write_conllu
from .projection import line_tree

__all__ = ["ControlledParser", "Parser", "Sentence", "make_parser", "read_conllu", "write_conllu",
           "BACKENDS"]

BACKENDS = ("stanza", "spacy", "conllu")
SETTING_KEYS = {"backend", "model", "lang", "resources_dir", "retokenize", "control"}


class Parser:
    """Base class of the backends: they implement :meth:`analyse`; :meth:`parse` does the rest."""

    settings: dict[str, Any]

    def analyse(self, batch: list[list[str]]) -> list[Sentence]:
        """The backend's raw analysis of each (non-empty) token list: a forest over the backend's
        own tokens, with ``sent_ids`` when the backend reports sentences."""
        raise NotImplementedError

    def describe(self) -> str:
        """A short human-readable name of the backend and model, for messages and manifests."""
        return f"{self.settings['backend']} {self.settings.get('model') or ''}".strip()

    def parse(self, batch: list[list[str]]) -> list[Sentence]:
        """One tree per item of ``batch``, over exactly its tokens (see :mod:`.projection`)."""
        trees = [Sentence.empty() for _ in batch]
        todo = [i for i, tokens in enumerate(batch) if tokens]
        analyses = self.analyse([list(batch[i]) for i in todo]) if todo else []
        if len(analyses) != len(todo):
            raise DepnmtError(f"{self.describe()}: returned {len(analyses)} analyses for "
                              f"{len(todo)} sentences")
        for i, analysis in zip(todo, analyses):
            trees[i] = line_tree(list(batch[i]), analysis)
        return trees


class ControlledParser(Parser):
    """A backend's parser whose trees are replaced by a control's trees of them."""

    def __init__(self, parser: Parser, control: Any):
        self.parser, self.control = parser, control
        self.settings = {**parser.settings, "control": control.to_dict()}

    def describe(self) -> str:
        return f"{self.parser.describe()}, {self.control.describe()} control trees"

    def parse(self, batch: list[list[str]]) -> list[Sentence]:
        return [self.control.apply(tree) for tree in self.parser.parse(batch)]


def make_parser(settings: dict[str, Any]) -> Parser:
    """A parser for ``settings`` (see the module docstring); raises DepnmtError on bad settings."""
    if settings.get("control") is not None:
        from .controls import Control
        control = Control.from_dict(settings["control"])
        return ControlledParser(make_parser({k: v for k, v in settings.items()
                                             if k != "control"}), control)
    backend = settings.get("backend") or "stanza"
    if backend == "conllu":
        raise DepnmtError("the 'conllu' backend reads trees made elsewhere and cannot parse new "
                          "text; use the stanza or spacy backend for that")
    unknown = set(settings) - SETTING_KEYS
    if unknown:
        raise DepnmtError(f"unknown parser settings {sorted(unknown)}; known: "
                          f"{sorted(SETTING_KEYS)}")
    if backend == "stanza":
        from .stanza_backend import StanzaParser
        return StanzaParser(lang=settings.get("lang"), model=settings.get("model"),
                            resources_dir=settings.get("resources_dir"))
    if backend == "spacy":
        from .spacy_backend import SpacyParser
        return SpacyParser(model=settings.get("model"), lang=settings.get("lang"),
                           retokenize=bool(settings.get("retokenize", False)))
    raise DepnmtError(f"unknown parser backend '{backend}'; choose one of {', '.join(BACKENDS)}")

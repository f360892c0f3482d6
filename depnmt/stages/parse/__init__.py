"""Dependency parsing: one tree per tokenized line, over exactly that line's tokens.

``make_parser(settings)`` builds a reusable parser (models load once) from a settings dict::

    {"backend": "stanza", "lang": "en", "model": None, "resources_dir": None}
    {"backend": "spacy", "lang": "ja", "model": "ja_ginza", "retokenize": False}

``parser.parse(batch)`` takes a list of token lists and returns one
:class:`~depnmt.core.conllu.Sentence` per item, with exactly the given tokens (an empty list gives
an empty Sentence). ``parser.settings`` is the dict to pass to ``make_parser`` again (the parse
stage stores it in its manifest; ``translate`` re-creates the parser from it). Settings with a
``control`` entry (a folder of ``depnmt controls``, :mod:`depnmt.stages.parse.controls`) make a
parser
whose trees are that control's trees of the backend's.
How several sentences or roots become one tree, and how a re-tokenizing backend's tree is
projected onto our tokens, is described in :mod:`depnmt.stages.parse.projection`.

Importing this package is cheap: stanza and spaCy are imported when a parser is made.
"""

from __future__ import annotations

from typing import Any

from depnmt.core.conllu import Sentence, read_conllu, write_conllu
from depnmt.core.errors import DepnmtError
from depnmt.stages.parse.parser import Parser

__all__ = ["ControlledParser", "Parser", "Sentence", "make_parser", "read_conllu", "write_conllu",
           "BACKENDS"]

BACKENDS = ("stanza", "spacy", "conllu")
SETTING_KEYS = {"backend", "model", "lang", "resources_dir", "retokenize", "control"}


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
        from depnmt.stages.parse.controls import Control
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
        from depnmt.stages.parse.stanza_backend import StanzaParser
        return StanzaParser(lang=settings.get("lang"), model=settings.get("model"),
                            resources_dir=settings.get("resources_dir"))
    if backend == "spacy":
        from depnmt.stages.parse.spacy_backend import SpacyParser
        return SpacyParser(model=settings.get("model"), lang=settings.get("lang"),
                           retokenize=bool(settings.get("retokenize", False)))
    raise DepnmtError(f"unknown parser backend '{backend}'; choose one of {', '.join(BACKENDS)}")

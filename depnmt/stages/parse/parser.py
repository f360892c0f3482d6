"""The parser interface of the backends (:mod:`depnmt.stages.parse.stanza_backend`,
:mod:`depnmt.stages.parse.spacy_backend`): each implements :meth:`Parser.analyse`, and
:meth:`Parser.parse` makes one tree per line of it (:mod:`depnmt.stages.parse.projection`)."""

from __future__ import annotations

from typing import Any

from depnmt.core.conllu import Sentence
from depnmt.core.errors import DepnmtError
from depnmt.stages.parse.projection import line_tree


class AnalysisError(DepnmtError):
    """A backend's analysis of item ``item`` (0-based) of a batch that makes no tree (a cycle,
    no root): the caller, who knows where the item came from, names its file and line."""

    def __init__(self, item: int, message: str):
        super().__init__(message)
        self.item, self.message = item, message

    def __reduce__(self):
        return AnalysisError, (self.item, self.message)


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
            try:
                trees[i] = line_tree(list(batch[i]), analysis)
            except ValueError as exc:       # the backend's output is no forest
                raise AnalysisError(i, f"{self.describe()}: {exc}") from None
        return trees

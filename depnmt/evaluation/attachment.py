"""Attachment scores of dependency trees against gold trees over the same words.

    UAS = #{words whose predicted head = gold head} / #words
    LAS = #{words whose predicted head and label = gold head and label} / #words

Used to measure a DBSA parse head's induced trees (``depnmt translate --induced-trees``) or a
parser backend against a gold treebank such as UD (``depnmt analyze uas``). Both sides must
have the same words per sentence (the induced trees of ``translate --input-format conllu`` and
a backend run on the gold words do); a sentence whose words differ is an error naming it, never
skipped. Labels are compared lower-cased and, with ``universal_labels``, without their subtype
(``obl:tmod`` = ``obl``), since parsers differ in which UD subtypes they produce. Trees labelled
only ``dep`` and ``root`` (a DBSA head predicts heads only) have no LAS (``las`` is None).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from depnmt.core.errors import DepnmtError, InputError
from depnmt.core.optionspec import Choice, File, Folder, check_options, option
from depnmt.stages.parse import Sentence


@dataclass
class AttachmentScore:
    """Counts over a set of sentences."""

    sentences: int = 0
    words: int = 0
    heads: int = 0          # words with the gold head
    labelled: int = 0       # words with the gold head and label
    has_labels: bool = False    # some predicted label is not the unlabelled "dep"

    @property
    def uas(self) -> float:
        return 100.0 * self.heads / self.words if self.words else 0.0

    @property
    def las(self) -> float | None:
        if not self.has_labels:
            return None
        return 100.0 * self.labelled / self.words if self.words else 0.0


@dataclass
class UasSettings:
    """The options of ``depnmt analyze uas`` (:func:`attachment_score` of each predicted file
    and of a parser's trees), each a field (:func:`~depnmt.core.optionspec.option`)."""

    gold_path: Path | None = option(None, "gold trees (CoNLL-U), e.g. a UD treebank",
                                    File(exists=True), flag="--gold", required=True)
    backend: str | None = option(None, "also parse the gold words with this parser backend and "
                                 "score it", Choice(["stanza", "spacy"]))
    model: str | None = option(None, "the backend's model (e.g. ja_ginza)", str)
    lang: str | None = option(None, "the backend's language (e.g. ja)", str)
    stanza_dir: str | None = option(None, "stanza resources folder", Folder(text=True))
    punct: bool = option(True, "count words whose gold label is punct", flag="--punct/--no-punct")

    def __post_init__(self):
        check_options(self)

    def check_request(self, predicted: Sequence[Path]) -> None:
        """A DepnmtError when there is nothing to score: no ``predicted`` files, no backend."""
        if not predicted and self.backend is None:
            raise DepnmtError("nothing to score: give PREDICTED CoNLL-U files and/or --backend")

    def parser_settings(self) -> dict:
        """The settings of :func:`depnmt.stages.parse.make_parser` for ``--backend``."""
        return {"backend": self.backend, "model": self.model, "lang": self.lang,
                **({"resources_dir": self.stanza_dir} if self.stanza_dir else {})}


def _label(deprel: str, universal: bool) -> str:
    deprel = deprel.lower()
    return deprel.split(":")[0] if universal else deprel


def attachment_score(pred: Iterable[Sentence], gold: Iterable[Sentence], pred_name: str = "pred",
                     gold_name: str = "gold", punct: bool = True,
                     universal_labels: bool = True) -> AttachmentScore:
    """UAS/LAS counts of ``pred`` against ``gold``, sentence by sentence.

    ``punct=False`` leaves out words whose gold label is ``punct`` (the CoNLL shared tasks'
    convention for UAS without punctuation). Raises :class:`DepnmtError` naming the sentence
    (1-based) when the two sides disagree in words or in the number of sentences.
    """
    score = AttachmentScore()
    pred_it, gold_it = iter(pred), iter(gold)
    for number, g in enumerate(gold_it, start=1):
        p = next(pred_it, None)
        if p is None:
            raise DepnmtError(f"{pred_name}: has {number - 1} sentences, {gold_name} has more")
        if list(p.words) != list(g.words):
            at = next((i for i, (a, b) in enumerate(zip(p.words, g.words)) if a != b),
                      min(len(p.words), len(g.words)))
            detail = (f"has other words than {gold_name} ({len(p.words)} vs {len(g.words)} "
                      f"words; first difference at word {at + 1}: "
                      f"{(p.words[at:at + 1] or ['<end>'])[0]!r} vs "
                      f"{(g.words[at:at + 1] or ['<end>'])[0]!r})")
            origin = getattr(p, "origin", None)     # FILE:LINE of a tree read from a file
            raise (InputError(origin[0], origin[1], detail) if origin is not None else
                   DepnmtError(f"{pred_name}: sentence {number} {detail}"))
        score.sentences += 1
        score.has_labels = score.has_labels or any(label.lower() not in ("dep", "root") for label in p.deprels)
        for ph, gh, pl, gl in zip(p.heads, g.heads, p.deprels, g.deprels):
            if not punct and gl.lower() == "punct":
                continue
            score.words += 1
            if ph == gh:
                score.heads += 1
                score.labelled += _label(pl, universal_labels) == _label(gl, universal_labels)
    if next(pred_it, None) is not None:
        raise DepnmtError(f"{pred_name}: has more sentences than {gold_name} "
                          f"({score.sentences})")
    return score

"""Test likelihood of a run: the log-probability its selected checkpoint gives the test
references (forced decoding, ``depnmt rescore``), kept beside its test hypotheses.

BLEU of one run moves by a point or more from seed to seed; the likelihood of the references is
a sharper measure of the same model, and it pairs the systems on every sentence. The comparison
recipes (``recipes/lib/compare.sh``) write it for every run after translating, with the
checkpoint that translated, and ``depnmt archive`` keeps it, so that ``depnmt report`` can
compare systems on it long after their checkpoints are gone.

The file ``HYP.ref-logprob`` (beside the run's hypothesis file ``HYP``, e.g.
``hyps/abs.de.ref-logprob``): a header line, then one line per test sentence, tab-separated::

    logprob	tokens	words
    -12.345678	14	11

``logprob``
    log p(reference | source), summed over the reference's target subwords and the
    end-of-sentence token (``depnmt rescore``'s second column);
``tokens``
    how many (its third column);
``words``
    the whitespace-separated words of the reference line scored: the same for every system that
    scored the same references, whatever its tokenizer or subwords.

From them, a run's test NLL **per word** = −Σ logprob / Σ words (comparable across
segmentations) and **per subword** = −Σ logprob / Σ tokens (comparable only between systems
whose tokens are the same on every sentence). As the sentence statistic of the tests of
:mod:`depnmt.evaluation.significance` (approximate randomization stratified over runs) and the
paired
bootstrap of :mod:`depnmt.evaluation.score`, a sentence contributes the row ``(−logprob, words,
tokens)``
(:data:`COLUMNS`): additive, so a pooled system's NLL is the ratio of its summed columns
(:class:`PerUnitNLL`, a metric those tests accept).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import NamedTuple, Sequence

import numpy as np

from depnmt.core.errors import DepnmtError, InputError
from depnmt.core.textio import iter_lines, naming

SUFFIX = ".ref-logprob"
HEADER = "logprob\ttokens\twords"
COLUMNS = ("nll", "words", "tokens")        # the columns of a sentence's statistics
WORDS, TOKENS = COLUMNS.index("words"), COLUMNS.index("tokens")


def likelihood_file(hyp: Path) -> Path:
    """Where the test likelihood of the run whose hypotheses are ``hyp`` is kept."""
    return hyp.with_name(hyp.name + SUFFIX)


def read_likelihood(path: Path, sentences: int) -> np.ndarray:
    """The sentence statistics of a likelihood file: ``[sentences, 3]`` float64 rows
    ``(−logprob, words, tokens)`` (:data:`COLUMNS`). ``sentences``: the test set's size. A
    missing header, a line that is not a finite log-probability ≤ 0 with whole numbers of
    tokens (≥ 1) and words (≥ 0), a line count other than ``sentences``, or no words at all
    is an error naming the file (and line)."""
    rows = []
    with naming(path, "read"):
        lines = iter_lines(path)
        if next(lines, None) != HEADER:
            raise InputError(path, 1, f"not a test likelihood file: the first line must be "
                                      f"'{HEADER.replace(chr(9), ' TAB ')}'")
        for number, line in enumerate(lines, start=2):
            rows.append(parse_row(path, number, line))
    if len(rows) != sentences:
        raise InputError(path, None, f"{len(rows)} sentences, but the references have "
                                     f"{sentences}: a likelihood of other references")
    stats = np.asarray(rows, dtype=np.float64).reshape(-1, len(COLUMNS))
    if stats[:, WORDS].sum() <= 0:
        raise InputError(path, None, "the references have no words")
    return stats


def parse_row(path: Path, number: int, line: str) -> tuple[float, int, int]:
    """One line ``logprob TAB tokens TAB words`` as ``(−logprob, words, tokens)``."""
    fields = line.split("\t")
    try:
        if len(fields) != 3:
            raise ValueError
        logprob, tokens, words = float(fields[0]), int(fields[1]), int(fields[2])
    except ValueError:
        raise InputError(path, number, f"expected logprob TAB tokens TAB words, got "
                                       f"{line[:60]!r}") from None
    if not math.isfinite(logprob) or logprob > 0 or tokens < 1 or words < 0:
        raise InputError(path, number, f"log-probability {fields[0]} (finite, at most 0), "
                                       f"{fields[1]} tokens (at least 1), {fields[2]} words "
                                       f"(at least 0): not a forced-decoding score")
    return -logprob, words, tokens


def check_same_words(files: Sequence[tuple[Path, np.ndarray]]) -> None:
    """The likelihood files of one report (``(path, statistics)``) must count the same words on
    every sentence: a different count means other references were scored (or the same ones
    differently), and per-word NLLs would not compare. The first difference is an error
    naming both files and the line."""
    if not files:
        return
    first, words = files[0][0], files[0][1][:, WORDS]
    for path, stats in files[1:]:
        differ = np.flatnonzero(stats[:, WORDS] != words)
        if differ.size:
            i = int(differ[0])
            raise InputError(path, i + 2, f"{int(stats[i, WORDS])} reference words, but "
                                          f"{first} has {int(words[i])} on that sentence: the "
                                          f"runs' likelihoods are of different references")


class Score(NamedTuple):
    """What :class:`PerUnitNLL` computes, shaped as sacreBLEU's scores (``.score``)."""

    score: float


class PerUnitNLL:
    """Test NLL per word (``unit`` = :data:`WORDS`) or per subword (:data:`TOKENS`) as a metric
    of summed sentence statistics, the interface of sacreBLEU's metrics that
    :func:`depnmt.evaluation.significance.pooled_score`, the approximate randomization and the
    paired
    bootstrap use: ``_compute_score_from_stats(sums)`` = ``sums[nll] / sums[unit]``."""

    def __init__(self, unit: int = WORDS):
        self.unit = unit

    def _compute_score_from_stats(self, stats: Sequence[float]) -> Score:
        return Score(stats[0] / stats[self.unit])


def run_nll(stats: np.ndarray) -> dict[str, float]:
    """One run's test NLL per word and per subword (``stats``: :func:`read_likelihood`)."""
    total = stats.sum(axis=0)
    return {"nll": float(total[0] / total[WORDS]), "nll_subword": float(total[0] / total[TOKENS])}

"""Decisions on items that come in groups: a contrastive set made from references (``depnmt
minimal-pairs``) varies one sentence in several places, and a model's decisions on one
sentence's items go together. Counted as independent, they make intervals too narrow and
p-values too small. The sentence (items with the same source) is the unit here:

* :func:`design_effect` — Kish's design effect of an accuracy over sentences,
  ``deff = Σ_s (y_s − p·m_s)² / Σ_i (y_i − p)²`` (``y_s`` the sentence's correct items, ``m_s``
  its items, ``p`` the accuracy): the variance of the accuracy estimated with the sentences as
  the sampled units (the ratio estimator's linearisation, Kish 1965 §6), over the variance when
  every item counted alone, both without finite-sample factors, at least 1. Every item its own
  sentence: 1; each sentence's item copied k times: exactly k. The accuracy's Wilson interval
  is then taken over the effective number of items ``n / deff`` (:meth:`Accuracy.interval
  <depnmt.evaluation.contrastive.Accuracy.interval>`).
* :func:`paired_p` — two models' decisions on the same items: McNemar's exact test where every
  item has its own sentence; otherwise a sign-flip permutation test over sentences (each
  sentence's difference in correct items, ``d_s``, keeps or flips its sign together; statistic
  ``|Σ_s d_s|``, two-sided, :data:`SIGN_FLIPS` draws, seeded), which is McNemar's exact test
  done by Monte Carlo when every sentence has one item.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

SIGN_FLIPS = 10_000
SEED = 12345
CHUNK_CELLS = 5_000_000     # signs drawn at once (float64)


def sentence_ids(sources: Sequence[str]) -> list[int]:
    """Each item's sentence as an index, given the items' sources (items of one source share
    it; numbered in order of first appearance)."""
    ids: dict[str, int] = {}
    return [ids.setdefault(source, len(ids)) for source in sources]


def design_effect(decisions: Sequence[bool], sentence: Sequence[int]) -> float:
    """Kish's design effect of the accuracy of ``decisions`` (one per item) over the items'
    ``sentence`` ids (see the module docstring); 1.0 without variance or with one item a
    sentence."""
    y = np.asarray(decisions, dtype=np.float64)
    if y.size == 0:
        return 1.0
    p = y.mean()
    naive = float(((y - p) ** 2).sum())
    if naive == 0.0:
        return 1.0
    _, cluster = np.unique(np.asarray(sentence), return_inverse=True)
    residual = np.bincount(cluster, weights=y - p)
    return max(1.0, float((residual ** 2).sum()) / naive)


def mcnemar_exact(base: Sequence[bool], other: Sequence[bool]) -> float:
    """Two-sided exact McNemar p-value of paired decisions: a binomial test (p = 1/2) on the
    items that exactly one of the two decides correctly."""
    b = sum(1 for x, y in zip(base, other) if x and not y)
    c = sum(1 for x, y in zip(base, other) if y and not x)
    n = b + c
    if n == 0:
        return 1.0
    log_half = n * math.log(0.5)
    tail = sum(math.exp(math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
                        + log_half) for k in range(min(b, c) + 1))
    return min(1.0, 2 * tail)


def sign_flip_p(base: Sequence[bool], other: Sequence[bool], sentence: Sequence[int],
                draws: int = SIGN_FLIPS, seed: int = SEED) -> float:
    """Two-sided p-value of the sign-flip permutation test over sentences (module docstring):
    ``(1 + #{draws with |Σ ±d_s| ≥ |Σ d_s|}) / (1 + draws)``."""
    d = np.asarray(other, dtype=np.float64) - np.asarray(base, dtype=np.float64)
    _, cluster = np.unique(np.asarray(sentence), return_inverse=True)
    per_sentence = np.bincount(cluster, weights=d)
    per_sentence = per_sentence[per_sentence != 0]
    observed = abs(per_sentence.sum())
    if per_sentence.size == 0:
        return 1.0
    rng = np.random.default_rng(seed)
    extreme = 0
    chunk = max(1, min(1000, CHUNK_CELLS // per_sentence.size))     # draws × sentences ≤ 40 MB
    for start in range(0, draws, chunk):
        signs = rng.choice((-1.0, 1.0), size=(min(chunk, draws - start), per_sentence.size))
        extreme += int((np.abs(signs @ per_sentence) >= observed - 1e-9).sum())
    return (extreme + 1) / (draws + 1)


def paired_p(base: Sequence[bool], other: Sequence[bool], sentence: Sequence[int]
             ) -> tuple[str, float]:
    """``(test, p)`` of two models' decisions on the same items: ``mcnemar`` (exact) where
    every item is its own sentence, else ``sign-flip`` over sentences (:func:`sign_flip_p`)."""
    if len(set(sentence)) == len(sentence):
        return "mcnemar", mcnemar_exact(base, other)
    return "sign-flip", sign_flip_p(base, other, sentence)

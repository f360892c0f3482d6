"""Greedy and beam search over a :class:`~depnmt.model.transformer.TransformerNMT` (or an
ensemble of them, :class:`depnmt.decoding.ensemble.Ensemble`: anything that is a :class:`Decoder`).

Beam search keeps ``beam`` live hypotheses per sentence, looks at the best ``2·beam``
continuations each step (so that finished ones never starve the beam, as in fairseq), finalises
hypotheses ending in EOS among the top ``beam`` ranks, and ranks finished hypotheses by
``score / lp(Y)``, |Y| the tokens scored (EOS included when the hypothesis has one), with the
length penalty ``length_penalty``:

* ``gnmt`` (default; Wu et al. 2016, OpenNMT-py's ``wu``): ``lp(Y) = ((5 + |Y|) / 6) ** alpha``;
* ``power`` (CTranslate2, fairseq, Marian): ``lp(Y) = |Y| ** alpha``. With ``--at-limit cut``
  this is the search of ``translate --ct2``.

The two rank alike for alpha = 0. For alpha > 0, one token more multiplies ``power``'s lp by
((|Y| + 1) / |Y|) ** alpha, more than ``gnmt``'s ((|Y| + 6) / (|Y| + 5)) ** alpha: ``power``
favours longer hypotheses more.
A sentence stops when it has ``beam`` finished hypotheses or reaches its maximum length
``L = ceil(max_len_a · |x| + max_len_b)`` (EOS included: at most L − 1 output tokens). What
happens at that length is ``at_limit``:

* ``eos`` (default; fairseq's ``SequenceGenerator``): step L may only produce EOS, so every live
  hypothesis ends with EOS and is ranked by a score that includes log p(EOS | y, x) — a cut
  hypothesis is scored as the complete sentence it becomes, and a repetition loop the model does
  not want to end ranks below the hypotheses that did end;
* ``cut`` (OpenNMT-py's and CTranslate2's ``max_decoding_length``): step L − 1 is the last; its
  ``beam`` best continuations (any token) are finalised as they are, without EOS and without
  its probability. This is what ``translate --ct2`` does (CTranslate2 cannot force EOS), so
  ``--at-limit cut`` makes depnmt's beam output that of the export.

Both give the same output on every sentence whose best hypothesis ends before the limit.
The settings (:class:`SearchConfig`, their defaults, bounds and help) are declared in
:mod:`depnmt.core.searchlimits`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor

from depnmt.core.errors import DepnmtError
from depnmt.core.searchlimits import (  # noqa: F401
    AT_LIMIT,
    LENGTH_PENALTIES,
    SearchConfig,
    check_at_limit,
    check_length_penalty,
)
from depnmt.core.vocab import BOS, EOS, PAD
from depnmt.model.schemes import Extras


class Decoder(Protocol):
    """What a search decodes with (:class:`~depnmt.model.transformer.TransformerNMT`
    implements it): a state for a source batch ``src [B, S]`` with its features, whose rows
    ``reorder(index)`` and ``reorder_targets(index)`` select; and logits ``[B, T, V]`` (or
    log-probabilities: the search normalises them) of the next tokens."""

    def search_state(self, src: Tensor, src_feats: Any, extras: Extras | None = None) -> Any:
        ...

    def decode(self, tgt_in: Tensor, state: Any, incremental: bool = False) -> Tensor:
        ...


def length_penalty(length: int, alpha: float, form: str = "gnmt") -> float:
    """lp(Y) for a hypothesis of ``length`` = |Y| scored tokens: ``gnmt`` ((5 + |Y|) / 6) **
    alpha, ``power`` |Y| ** alpha (|Y| at least 1: an empty one is not divided)."""
    if form == "power":
        return max(length, 1) ** alpha
    return ((5.0 + length) / 6.0) ** alpha


def max_lengths(src: Tensor, cfg: SearchConfig) -> Tensor:
    """Per-sentence output limits ``[B]`` (source length without EOS)."""
    src_len = (src != PAD).sum(1) - 1
    return torch.ceil(src_len.float() * cfg.max_len_a + cfg.max_len_b).long().clamp(min=1)


@dataclass(frozen=True)
class Hypothesis:
    """One entry of an n-best list: ``tokens`` (target ids, no BOS/EOS), ``score`` (the
    length-normalised log-probability ``logprob / lp(|Y|)`` that ranks the hypotheses of a beam,
    :func:`length_penalty` of the search's form) and ``logprob`` (the sum of log p over the |Y|
    tokens scored: the hypothesis and its EOS, or without EOS for one ended as it was at the
    length limit)."""

    tokens: list[int]
    score: float
    logprob: float


@torch.no_grad()
def greedy_search(model: Decoder, src: Tensor, src_feats: dict[str, Tensor],
                  cfg: SearchConfig, extras: Extras | None = None) -> list[list[int]]:
    """Arg-max decoding; returns token ids (no BOS/EOS) per sentence of ``src [B, S]`` (the
    encoder's extras, e.g. parse scores, go to ``extras`` when given)."""
    seqs, _, _ = _greedy_steps(model, src, src_feats, cfg, extras, score=False)
    return _greedy_tokens(seqs.tolist())


@torch.no_grad()
def greedy_nbest(model: Decoder, src: Tensor, src_feats: dict[str, Tensor],
                 cfg: SearchConfig, extras: Extras | None = None) -> list[list[Hypothesis]]:
    """:func:`greedy_search` with the score of each output: a one-entry n-best list per
    sentence of ``src [B, S]``."""
    seqs, logprob, scored = _greedy_steps(model, src, src_feats, cfg, extras)
    sums = torch.stack([logprob.double(), scored.double()], 1).tolist()
    return [[Hypothesis(ids, total / length_penalty(int(n), cfg.alpha, cfg.length_penalty),
                        total)]
            for ids, (total, n) in zip(_greedy_tokens(seqs.tolist()), sums)]


def _greedy_steps(model: Decoder, src: Tensor, src_feats: dict[str, Tensor],
                  cfg: SearchConfig, extras: Extras | None,
                  score: bool = True) -> tuple[Tensor, Tensor, Tensor]:
    """Greedy decoding of ``src [B, S]``: the tokens ``[B, T]`` (EOS, then PAD), the sum of
    their log-probabilities ``[B]`` and how many were scored ``[B]`` (the EOS forced at the
    length limit is scored with ``at_limit`` eos, not with cut: as in :func:`beam_search`).
    One host read a step (whether every sentence has ended). Without ``score`` the sums stay
    0 (no log-softmax over the vocabulary: plain greedy output needs none)."""
    state = model.search_state(src, src_feats, extras)
    b = src.shape[0]
    limit = max_lengths(src, cfg)
    score_forced = check_at_limit(cfg.at_limit) == "eos"
    tokens = torch.full((b, 1), BOS, dtype=torch.long, device=src.device)
    done = torch.zeros(b, dtype=torch.bool, device=src.device)
    logprob = torch.zeros(b, device=src.device)
    scored = torch.zeros(b, dtype=torch.long, device=src.device)
    out = []
    for step in range(int(limit.max())):
        logits = model.decode(tokens, state, incremental=True)[:, -1]
        nxt = logits.argmax(-1)
        nxt = torch.where(done, torch.full_like(nxt, PAD), nxt)
        forced = ~done & (step + 1 >= limit)
        nxt = torch.where(forced, torch.full_like(nxt, EOS), nxt)
        if score:
            counts = ~done & (~forced | score_forced)
            token_lp = torch.log_softmax(logits.float(), -1).gather(1, nxt[:, None]).squeeze(1)
            logprob += torch.where(counts, token_lp, 0.0)
            scored += counts.long()
        out.append(nxt)
        done |= nxt == EOS
        tokens = nxt.unsqueeze(1)
        if bool(done.all()):
            break
    return torch.stack(out, 1), logprob, scored


def _greedy_tokens(seqs: list[list[int]]) -> list[list[int]]:
    """Each greedy output's tokens before its EOS (no PAD)."""
    return [[t for t in seq if t not in (PAD,)][: seq.index(EOS) if EOS in seq else None]
            for seq in seqs]


def _next_log_probs(model: Decoder, state: Any, last: Tensor, banned: Tensor,
                    eos_only: Tensor | None, k: int) -> Tensor:
    """log p(next token) ``[n·K, V]`` of the live hypotheses, whose last tokens are ``last
    [n·K, 1]``; the tokens ``banned [2]`` (PAD and BOS) get -inf, and the hypotheses of a
    sentence with ``eos_only [n]`` (at its length limit, ``at_limit`` eos; None: no sentence
    is) may only end (EOS)."""
    logits = model.decode(last, state, incremental=True)[:, -1].float()
    lprobs = torch.log_softmax(logits, -1).index_fill_(1, banned, -math.inf)
    if eos_only is None:
        return lprobs
    not_eos = torch.arange(lprobs.shape[1], device=lprobs.device) != EOS
    return lprobs.masked_fill(eos_only.repeat_interleave(k)[:, None] & not_eos, -math.inf)


class Finished:
    """The ``n`` best finished hypotheses of every sentence so far, best first, kept on the
    search's device (no host reads while searching): ``score [B, n]`` (float64
    ``logprob / lp(|Y|)``, -inf: none yet), ``logprob [B, n]`` (float64), ``tokens [B, n, W]``
    (EOS included when it has one, PAD after) and ``count [B]`` (finished hypotheses so far).
    Among equal scores the first finished one ranks first."""

    def __init__(self, b: int, width: int, device: torch.device, n: int = 1):
        self.score = torch.full((b, n), -math.inf, dtype=torch.float64, device=device)
        self.logprob = torch.full((b, n), -math.inf, dtype=torch.float64, device=device)
        self.tokens = torch.full((b, n, width), PAD, dtype=torch.long, device=device)
        self.count = torch.zeros(b, dtype=torch.long, device=device)

    def add(self, sent: Tensor, score: Tensor, logprob: Tensor, tokens: Tensor,
            count: Tensor) -> None:
        """Sentences ``sent [m]`` finished ``count [m]`` more hypotheses, the best of them
        (best first) scoring ``score [m, c]`` (-inf: none) with log-probabilities ``logprob
        [m, c]`` and ``tokens [m, c, t]``: the ``n`` best of theirs and these are kept."""
        n, width = self.score.shape[1], self.tokens.shape[2]
        merged = torch.cat([self.score[sent], score], 1)
        order = merged.argsort(dim=1, descending=True, stable=True)[:, :n]       # (m, n)
        padded = F.pad(tokens, (0, width - tokens.shape[2]), value=PAD)
        self.score[sent] = merged.gather(1, order)
        self.logprob[sent] = torch.cat([self.logprob[sent], logprob], 1).gather(1, order)
        self.tokens[sent] = torch.cat([self.tokens[sent], padded], 1).gather(
            1, order[:, :, None].expand(-1, -1, width))
        self.count[sent] += count

    def add_if_none(self, sent: Tensor, tokens: Tensor) -> None:
        """Sentences ``sent [m]`` with no finished hypothesis take ``tokens [m, t]`` (score
        -inf)."""
        none = self.score[sent, 0] == -math.inf
        padded = F.pad(tokens, (0, self.tokens.shape[2] - tokens.shape[1]), value=PAD)
        self.tokens[sent, 0] = torch.where(none[:, None], padded, self.tokens[sent, 0])

    def best(self, limits: list[int]) -> list[list[int]]:
        """The tokens of every sentence's best hypothesis (no PAD or EOS), at most its limit − 1
        (one host read)."""
        return [_output_tokens(row, lim) for row, lim in zip(self.tokens[:, 0].tolist(), limits)]

    def nbest(self, limits: list[int]) -> list[list[Hypothesis]]:
        """Every sentence's finished hypotheses, best first (the first even unscored; two host
        reads)."""
        values = torch.stack([self.score, self.logprob], 2).tolist()
        return [[Hypothesis(_output_tokens(row, lim), score, logprob)
                 for j, (row, (score, logprob)) in enumerate(zip(rows, scored))
                 if j == 0 or score > -math.inf]
                for rows, scored, lim in zip(self.tokens.tolist(), values, limits)]


def _output_tokens(row: list[int], limit: int) -> list[int]:
    """A hypothesis's tokens without PAD or EOS, at most ``limit − 1``."""
    return [t for t in row if t not in (PAD, EOS)][:max(limit - 1, 0)]


def _best_final(final: Tensor, scores: Tensor, beams: Tensor, tokens: Tensor, seqs: Tensor,
                k: int, lp: float, n: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The ``n`` best of each sentence's candidates that end here, ``final [m, C]`` (scores
    ``scores [m, C]``, extending the live hypotheses ``beams [m, C]`` of ``seqs [m·K, t + 1]``
    with ``tokens [m, C]``), all scored over |Y| tokens with ``lp = lp(|Y|)``, best first (the
    first of equal ones first): their scores ``[m, n]`` (float64 ``score / lp``; -inf: none),
    log-probabilities ``[m, n]`` (float64), tokens ``[m, n, t + 1]`` (BOS dropped) and the
    number of candidates that end ``[m]``."""
    normed = torch.where(final, scores.double() / lp, -math.inf)
    j = normed.argsort(dim=1, descending=True, stable=True)[:, :n]              # (m, n)
    rows = torch.arange(len(j), device=j.device)[:, None] * k + beams.gather(1, j)
    hyps = torch.cat([seqs[rows, 1:], tokens.gather(1, j)[:, :, None]], dim=2)
    return normed.gather(1, j), scores.gather(1, j).double(), hyps, final.sum(1)


@torch.no_grad()
def beam_search(model: Decoder, src: Tensor, src_feats: dict[str, Tensor],
                cfg: SearchConfig, extras: Extras | None = None) -> list[list[int]]:
    """Beam search (see module docstring); returns the best hypothesis per sentence. For
    ``cfg.beam == 1`` call :func:`search`, which decodes greedily."""
    finished, limits = _beam(model, src, src_feats, cfg, 1, extras)
    return finished.best(limits)


@torch.no_grad()
def beam_nbest(model: Decoder, src: Tensor, src_feats: dict[str, Tensor],
               cfg: SearchConfig, nbest: int, extras: Extras | None = None
               ) -> list[list[Hypothesis]]:
    """Beam search's ``nbest`` (≤ ``cfg.beam``) best finished hypotheses per sentence, best
    first; the first is :func:`beam_search`'s. Fewer only where the search finished fewer (a
    length limit of one token leaves only the empty hypothesis)."""
    finished, limits = _beam(model, src, src_feats, cfg, check_nbest(nbest, cfg.beam), extras)
    return finished.nbest(limits)


def _beam(model: Decoder, src: Tensor, src_feats: dict[str, Tensor], cfg: SearchConfig,
          nbest: int, extras: Extras | None) -> tuple[Finished, list[int]]:
    """Beam search keeping the ``nbest`` best finished hypotheses of each sentence of ``src [B,
    S]``; returns them and the output limits (per sentence).

    Sentences that are done leave the batch (their rows of every tensor and cache are dropped),
    and the source side of the decoder state is only re-indexed then: a beam step keeps every
    hypothesis within its own sentence, whose source rows are all equal. Finished hypotheses
    stay on the device (:class:`Finished`); the host reads which sentences go on once a step.
    """
    b, k, device = src.shape[0], cfg.beam, src.device
    state = model.search_state(src, src_feats, extras)
    state.reorder(torch.arange(b, device=device).repeat_interleave(k))   # (B·K, ...)
    limit = max_lengths(src, cfg)
    limits = limit.tolist()           # per sentence, for the output
    cut = check_at_limit(cfg.at_limit) == "cut"
    last = (limit - 2).clamp(min=0) if cut else limit - 1        # the step that ends everything
    steps = 1 + max(max(limits) - (2 if cut else 1), 0)          # 1 + the largest of ``last``
    scores = torch.full((b, k), -math.inf, device=device)
    scores[:, 0] = 0.0
    seqs = torch.full((b * k, 1), BOS, dtype=torch.long, device=device)
    finished = Finished(b, steps, device, nbest)
    sent = torch.arange(b, device=device)       # original sentence of each row block
    banned = torch.tensor([PAD, BOS], device=device)
    lasts = [max(lim - 2, 0) if cut else lim - 1 for lim in limits]   # ``last``, on the host
    for step in range(steps):
        n = len(sent)
        # (n,): which sentences are at their limit; None while none is (known on the host)
        at_limit = step >= last if any(step >= lim for lim in lasts) else None
        lprobs = _next_log_probs(model, state, seqs[:, -1:], banned, None if cut else at_limit, k)
        cand_scores, cand_beam, cand_tok = _candidates(scores, lprobs, k)
        is_eos = (cand_tok == EOS) & torch.isfinite(cand_scores)
        rank = torch.arange(cand_scores.shape[1], device=device).expand_as(cand_scores)
        final = is_eos & (rank < k)
        if cut and at_limit is not None:     # at the limit the K best end as they are
            final |= at_limit[:, None] & (rank < k) & torch.isfinite(cand_scores)
        # |Y| = step + 1 tokens scored: the hypothesis + EOS, or + the cut one's last token
        finished.add(sent, *_best_final(final, cand_scores, cand_beam, cand_tok, seqs, k,
                                        length_penalty(step + 1, cfg.alpha,
                                                       cfg.length_penalty), nbest))
        alive_scores, src_rows, tokens = _alive(cand_scores, cand_beam, cand_tok, is_eos, rank, k)
        # past its limit a sentence can add nothing
        going = ((finished.count[sent] < k) & (last > step)).tolist()     # the step's host read
        keep = [i for i in range(n) if going[i]]
        if not keep:
            break
        if len(keep) < n:             # finished sentences leave the batch
            kept = torch.tensor(keep, device=device)
            sent, src_rows, tokens = sent[kept], src_rows[kept], tokens[kept]
            alive_scores, last = alive_scores[kept], last[kept]
            lasts = [lasts[i] for i in keep]
            state.reorder(src_rows.view(-1))
        else:
            state.reorder_targets(src_rows.view(-1))
        seqs = torch.cat([seqs[src_rows.view(-1)], tokens.view(-1, 1)], dim=1)
        scores = alive_scores
    finished.add_if_none(sent, seqs[::k, 1:])
    return finished, limits


def _candidates(scores: Tensor, lprobs: Tensor, k: int) -> tuple[Tensor, Tensor, Tensor]:
    """The ``2K`` best one-token extensions of each sentence's ``K`` live hypotheses (their
    scores ``scores [n, K]``, next-token log-probabilities ``lprobs [n·K, V]``): their scores,
    the live hypothesis each extends (0..K-1) and its token, each ``[n, 2K]``."""
    n, vocab = scores.shape[0], lprobs.shape[1]
    cand = (scores.view(n * k, 1) + lprobs).view(n, k * vocab)
    cand_scores, cand_idx = cand.topk(min(2 * k, k * vocab), dim=1)          # (n, 2K)
    return cand_scores, cand_idx // vocab, cand_idx % vocab


def _alive(cand_scores: Tensor, cand_beam: Tensor, cand_tok: Tensor, is_eos: Tensor, rank: Tensor,
           k: int) -> tuple[Tensor, Tensor, Tensor]:
    """The ``K`` best candidates ``[n, 2K]`` that do not end (EOS) stay alive: their scores
    ``[n, K]`` (-inf where fewer), the rows ``[n, K]`` of the hypotheses they extend (in the
    ``n·K`` rows of the step) and their tokens ``[n, K]``."""
    order = (rank + is_eos.long() * 4 * k).argsort(dim=1)[:, :k]
    alive_scores = cand_scores.gather(1, order).masked_fill(is_eos.gather(1, order), -math.inf)
    rows = torch.arange(len(order), device=order.device)[:, None] * k + cand_beam.gather(1, order)
    return alive_scores, rows, cand_tok.gather(1, order)


def check_nbest(nbest: int, beam: int) -> int:
    """``nbest`` when 1 ≤ ``nbest`` ≤ ``beam`` (n-best lists come from the beam), else a
    :class:`DepnmtError`."""
    if nbest < 1:
        raise DepnmtError(f"nbest {nbest}: expected at least 1")
    if nbest > max(beam, 1):
        raise DepnmtError(f"nbest {nbest} is more than the beam ({beam}): the n-best list comes "
                          f"from the beam; give a beam of at least {nbest}")
    return nbest


def search(model: Decoder, src: Tensor, src_feats: dict[str, Tensor],
           cfg: SearchConfig, extras: Extras | None = None) -> list[list[int]]:
    """Greedy when ``cfg.beam == 1``, beam search otherwise (the encoder's extras go to
    ``extras`` when given)."""
    return (greedy_search if cfg.beam <= 1 else beam_search)(model, src, src_feats, cfg, extras)


def search_nbest(model: Decoder, src: Tensor, src_feats: dict[str, Tensor],
                 cfg: SearchConfig, nbest: int, extras: Extras | None = None
                 ) -> list[list[Hypothesis]]:
    """:func:`search` with scores: the ``nbest`` (≤ ``cfg.beam``) best hypotheses of each
    sentence of ``src [B, S]``, best first (:func:`beam_nbest`; greedy: its one output)."""
    check_nbest(nbest, cfg.beam)
    if cfg.beam <= 1:
        return greedy_nbest(model, src, src_feats, cfg, extras)
    return beam_nbest(model, src, src_feats, cfg, nbest, extras)

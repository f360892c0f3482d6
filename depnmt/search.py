"""Greedy and beam search over a :class:`~depnmt.model.transformer.TransformerNMT`.

Beam search keeps ``beam`` live hypotheses per sentence, looks at the best ``2·beam``
continuations each step (so that finished ones never starve the beam, as in fairseq), finalises
hypotheses ending in EOS among the top ``beam`` ranks, and ranks finished hypotheses by the GNMT
length penalty (Wu et al. 2016): ``score / lp(Y)``, ``lp(Y) = ((5 + |Y|) / 6) ** alpha``, |Y| the
tokens scored (EOS included when the hypothesis has one).
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
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from .errors import DepnmtError
from .model.schemes import Extras
from .model.transformer import DecoderState, TransformerNMT
from .vocab import BOS, EOS, PAD


@dataclass
class SearchConfig:
    beam: int = 4
    alpha: float = 0.6          # GNMT length penalty; 0 = plain log-probability
    max_len_a: float = 1.5      # max output length = a · source length + b
    max_len_b: int = 10
    at_limit: str = "eos"       # eos (fairseq) or cut (OpenNMT-py, CTranslate2): module docstring


def length_penalty(length: Tensor | int, alpha: float) -> Tensor | float:
    """GNMT lp(Y) = ((5 + |Y|) / 6) ** alpha."""
    return ((5.0 + length) / 6.0) ** alpha


def max_lengths(src: Tensor, cfg: SearchConfig) -> Tensor:
    """Per-sentence output limits ``[B]`` (source length without EOS)."""
    src_len = (src != PAD).sum(1) - 1
    return torch.ceil(src_len.float() * cfg.max_len_a + cfg.max_len_b).long().clamp(min=1)


@torch.no_grad()
def greedy_search(model: TransformerNMT, src: Tensor, src_feats: dict[str, Tensor],
                  cfg: SearchConfig, extras: Extras | None = None) -> list[list[int]]:
    """Arg-max decoding; returns token ids (no BOS/EOS) per sentence of ``src [B, S]`` (the
    encoder's extras, e.g. parse scores, go to ``extras`` when given)."""
    memory, src_mask = model.encode(src, src_feats, extras)
    state = model.start_state(memory, src_mask)
    b = src.shape[0]
    limit = max_lengths(src, cfg)
    tokens = torch.full((b, 1), BOS, dtype=torch.long, device=src.device)
    done = torch.zeros(b, dtype=torch.bool, device=src.device)
    out = []
    for step in range(int(limit.max())):
        logits = model.decode(tokens, state, incremental=True)[:, -1]
        nxt = logits.argmax(-1)
        nxt = torch.where(done, torch.full_like(nxt, PAD), nxt)
        nxt = torch.where(~done & (step + 1 >= limit), torch.full_like(nxt, EOS), nxt)
        out.append(nxt)
        done |= nxt == EOS
        tokens = nxt.unsqueeze(1)
        if bool(done.all()):
            break
    seqs = torch.stack(out, 1).tolist()
    return [[t for t in seq if t not in (PAD,)][: seq.index(EOS) if EOS in seq else None]
            for seq in seqs]


def _next_log_probs(model: TransformerNMT, state: DecoderState, last: Tensor, banned: Tensor,
                    eos_only: Tensor, k: int) -> Tensor:
    """log p(next token) ``[n·K, V]`` of the live hypotheses, whose last tokens are ``last
    [n·K, 1]``; ``banned [V]`` is added (-inf for PAD and BOS), and the hypotheses of a sentence
    with ``eos_only [n]`` (at its length limit, ``at_limit`` eos) may only end (EOS)."""
    logits = model.decode(last, state, incremental=True)[:, -1].float()
    lprobs = torch.log_softmax(logits, -1) + banned
    not_eos = torch.arange(lprobs.shape[1], device=lprobs.device) != EOS
    return lprobs.masked_fill(eos_only.repeat_interleave(k)[:, None] & not_eos, -math.inf)


class Finished:
    """The best finished hypothesis of every sentence so far, kept on the search's device (no
    host reads while searching): ``score [B]`` (float64 ``score / lp(|Y|)``, -inf: none yet),
    ``tokens [B, W]`` (its tokens, EOS included when it has one, PAD after) and ``count [B]``
    (finished hypotheses so far). Among equal scores the first finished one is kept."""

    def __init__(self, b: int, width: int, device: torch.device):
        self.score = torch.full((b,), -math.inf, dtype=torch.float64, device=device)
        self.tokens = torch.full((b, width), PAD, dtype=torch.long, device=device)
        self.count = torch.zeros(b, dtype=torch.long, device=device)

    def add(self, sent: Tensor, score: Tensor, tokens: Tensor, count: Tensor) -> None:
        """Sentences ``sent [n]`` finished ``count [n]`` more hypotheses, the best of them
        scoring ``score [n]`` (-inf: none) with ``tokens [n, t]``."""
        better = score > self.score[sent]
        self.score[sent] = torch.where(better, score, self.score[sent])
        self._take(sent, better, tokens)
        self.count[sent] += count

    def add_if_none(self, sent: Tensor, tokens: Tensor) -> None:
        """Sentences ``sent [n]`` with no finished hypothesis take ``tokens [n, t]``."""
        self._take(sent, self.score[sent] == -math.inf, tokens)

    def _take(self, sent: Tensor, take: Tensor, tokens: Tensor) -> None:
        """``tokens [n, t]`` (PAD after) replace those of the sentences ``sent [n]`` where
        ``take [n]``."""
        padded = F.pad(tokens, (0, self.tokens.shape[1] - tokens.shape[1]), value=PAD)
        self.tokens[sent] = torch.where(take[:, None], padded, self.tokens[sent])

    def best(self, limits: list[int]) -> list[list[int]]:
        """The tokens of every sentence's best hypothesis (no PAD or EOS), at most its limit − 1
        (one host read)."""
        return [[t for t in row if t not in (PAD, EOS)][:max(lim - 1, 0)]
                for row, lim in zip(self.tokens.tolist(), limits)]


def _best_final(final: Tensor, scores: Tensor, beams: Tensor, tokens: Tensor, seqs: Tensor,
                k: int, lp: float) -> tuple[Tensor, Tensor, Tensor]:
    """The best of each sentence's candidates that end here, ``final [n, C]`` (scores ``scores
    [n, C]``, extending the live hypotheses ``beams [n, C]`` of ``seqs [n·K, t + 1]`` with
    ``tokens [n, C]``), all scored over |Y| tokens with ``lp = lp(|Y|)``: its score ``[n]``
    (float64 ``score / lp``; -inf: none, the first of equal ones), its tokens ``[n, t + 1]``
    (BOS dropped) and the number of candidates that end ``[n]``."""
    normed = torch.where(final, scores.double() / lp, -math.inf)
    best, j = normed.max(1)
    j = j[:, None]
    rows = torch.arange(len(j), device=j.device) * k + beams.gather(1, j).squeeze(1)
    return best, torch.cat([seqs[rows, 1:], tokens.gather(1, j)], dim=1), final.sum(1)


@torch.no_grad()
def beam_search(model: TransformerNMT, src: Tensor, src_feats: dict[str, Tensor],
                cfg: SearchConfig, extras: Extras | None = None) -> list[list[int]]:
    """Beam search (see module docstring); returns the best hypothesis per sentence. For
    ``cfg.beam == 1`` call :func:`search`, which decodes greedily.

    Sentences that are done leave the batch (their rows of every tensor and cache are dropped),
    and the source side of the decoder state is only re-indexed then: a beam step keeps every
    hypothesis within its own sentence, whose source rows are all equal. Finished hypotheses
    stay on the device (:class:`Finished`); the host reads which sentences go on once a step.
    """
    b, k, device = src.shape[0], cfg.beam, src.device
    memory, src_mask = model.encode(src, src_feats, extras)
    state = model.start_state(memory, src_mask)
    state.reorder(torch.arange(b, device=device).repeat_interleave(k))   # (B·K, ...)
    limit = max_lengths(src, cfg)
    limits = limit.tolist()           # per sentence, for the output
    cut = check_at_limit(cfg.at_limit) == "cut"
    last = (limit - 2).clamp(min=0) if cut else limit - 1        # the step that ends everything
    steps = 1 + max(max(limits) - (2 if cut else 1), 0)          # 1 + the largest of ``last``
    scores = torch.full((b, k), -math.inf, device=device)
    scores[:, 0] = 0.0
    seqs = torch.full((b * k, 1), BOS, dtype=torch.long, device=device)
    finished = Finished(b, steps, device)
    sent = torch.arange(b, device=device)       # original sentence of each row block
    banned = torch.zeros(model.cfg.tgt_vocab_size, device=device)
    banned[[PAD, BOS]] = -math.inf
    for step in range(steps):
        n = len(sent)
        at_limit = step >= last                                                # (n,)
        lprobs = _next_log_probs(model, state, seqs[:, -1:], banned, at_limit & (not cut), k)
        vocab = lprobs.shape[1]
        cand = (scores.view(n * k, 1) + lprobs).view(n, k * vocab)
        cand_scores, cand_idx = cand.topk(min(2 * k, k * vocab), dim=1)          # (n, 2K)
        cand_beam, cand_tok = cand_idx // vocab, cand_idx % vocab
        is_eos = (cand_tok == EOS) & torch.isfinite(cand_scores)
        rank = torch.arange(cand_scores.shape[1], device=device).expand_as(cand_scores)
        final = is_eos & (rank < k)
        if cut:                       # at the limit the K best end as they are
            final |= at_limit[:, None] & (rank < k) & torch.isfinite(cand_scores)
        # |Y| = step + 1 tokens scored: the hypothesis + EOS, or + the cut one's last token
        finished.add(sent, *_best_final(final, cand_scores, cand_beam, cand_tok, seqs, k,
                                        length_penalty(step + 1, cfg.alpha)))
        # the K best continuations that are not EOS stay alive
        order = (rank + is_eos.long() * 4 * k).argsort(dim=1)[:, :k]
        alive_scores = cand_scores.gather(1, order).masked_fill(is_eos.gather(1, order), -math.inf)
        src_rows = (torch.arange(n, device=device)[:, None] * k + cand_beam.gather(1, order))
        tokens = cand_tok.gather(1, order)
        # past its limit a sentence can add nothing
        going = ((finished.count[sent] < k) & (last > step)).tolist()     # the step's host read
        keep = [i for i in range(n) if going[i]]
        if not keep:
            break
        if len(keep) < n:             # finished sentences leave the batch
            kept = torch.tensor(keep, device=device)
            sent, src_rows, tokens = sent[kept], src_rows[kept], tokens[kept]
            alive_scores, last = alive_scores[kept], last[kept]
            state.reorder(src_rows.view(-1))
        else:
            state.reorder_targets(src_rows.view(-1))
        seqs = torch.cat([seqs[src_rows.view(-1)], tokens.view(-1, 1)], dim=1)
        scores = alive_scores
    finished.add_if_none(sent, seqs[::k, 1:])
    return finished.best(limits)


AT_LIMIT = ("eos", "cut")


def check_at_limit(value: str) -> str:
    if value not in AT_LIMIT:
        raise DepnmtError(f"at_limit {value!r}: expected one of {', '.join(AT_LIMIT)}")
    return value


def search(model: TransformerNMT, src: Tensor, src_feats: dict[str, Tensor],
           cfg: SearchConfig, extras: Extras | None = None) -> list[list[int]]:
    """Greedy when ``cfg.beam == 1``, beam search otherwise (the encoder's extras go to
    ``extras`` when given)."""
    return (greedy_search if cfg.beam <= 1 else beam_search)(model, src, src_feats, cfg, extras)

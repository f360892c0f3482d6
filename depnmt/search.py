"""Greedy and beam search over a :class:`~depnmt.model.transformer.TransformerNMT`.

Beam search keeps ``beam`` live hypotheses per sentence, looks at the best ``2·beam``
continuations each step (so that finished ones never starve the beam, as in fairseq), finalises
hypotheses ending in EOS among the top ``beam`` ranks, and ranks finished hypotheses by the GNMT
length penalty (Wu et al. 2016): ``score / lp(Y)``, ``lp(Y) = ((5 + |Y|) / 6) ** alpha``.
A sentence stops when it has ``beam`` finished hypotheses or reaches its maximum length
``ceil(max_len_a · |x| + max_len_b)``; at that length live hypotheses are finalised as they are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from .model.transformer import TransformerNMT
from .vocab import BOS, EOS, PAD


@dataclass
class SearchConfig:
    beam: int = 4
    alpha: float = 0.6          # GNMT length penalty; 0 = plain log-probability
    max_len_a: float = 1.5      # max output length = a · source length + b
    max_len_b: int = 10


def length_penalty(length: Tensor | int, alpha: float) -> Tensor | float:
    """GNMT lp(Y) = ((5 + |Y|) / 6) ** alpha."""
    return ((5.0 + length) / 6.0) ** alpha


def max_lengths(src: Tensor, cfg: SearchConfig) -> Tensor:
    """Per-sentence output limits ``[B]`` (source length without EOS)."""
    src_len = (src != PAD).sum(1) - 1
    return torch.ceil(src_len.float() * cfg.max_len_a + cfg.max_len_b).long().clamp(min=1)


@torch.no_grad()
def greedy_search(model: TransformerNMT, src: Tensor, src_feats: dict[str, Tensor],
                  cfg: SearchConfig) -> list[list[int]]:
    """Arg-max decoding; returns token ids (no BOS/EOS) per sentence of ``src [B, S]``."""
    memory, src_mask = model.encode(src, src_feats)
    state = model.start_state(memory, src_mask, src_feats)
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


@torch.no_grad()
def beam_search(model: TransformerNMT, src: Tensor, src_feats: dict[str, Tensor],
                cfg: SearchConfig) -> list[list[int]]:
    """Beam search (see module docstring); returns the best hypothesis per sentence."""
    if cfg.beam <= 1:
        return greedy_search(model, src, src_feats, cfg)
    b, k, device = src.shape[0], cfg.beam, src.device
    memory, src_mask = model.encode(src, src_feats)
    state = model.start_state(memory, src_mask, src_feats)
    state.reorder(torch.arange(b, device=device).repeat_interleave(k))   # (B·K, ...)
    limit = max_lengths(src, cfg)
    scores = torch.full((b, k), -math.inf, device=device)
    scores[:, 0] = 0.0
    seqs = torch.full((b * k, 1), BOS, dtype=torch.long, device=device)
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(b)]
    active = torch.ones(b, dtype=torch.bool, device=device)
    for step in range(int(limit.max())):
        lprobs = torch.log_softmax(model.decode(seqs[:, -1:], state, incremental=True)[:, -1].float(), -1)
        lprobs[:, PAD] = -math.inf
        lprobs[:, BOS] = -math.inf
        at_limit = (step + 1 >= limit).repeat_interleave(k)
        lprobs[at_limit] = torch.where(torch.arange(lprobs.shape[1], device=device) == EOS,
                                       lprobs[at_limit], torch.tensor(-math.inf, device=device))
        vocab = lprobs.shape[1]
        cand = (scores.view(b * k, 1) + lprobs).view(b, k * vocab)
        cand_scores, cand_idx = cand.topk(min(2 * k, k * vocab), dim=1)          # (B, 2K)
        cand_beam, cand_tok = cand_idx // vocab, cand_idx % vocab
        is_eos = (cand_tok == EOS) & torch.isfinite(cand_scores)
        rank = torch.arange(cand_scores.shape[1], device=device).expand_as(cand_scores)
        final = is_eos & (rank < k) & active[:, None]
        for i, j in final.nonzero().tolist():
            hyp = seqs[i * k + cand_beam[i, j]].tolist()[1:]
            finished[i].append((float(cand_scores[i, j]) / length_penalty(len(hyp) + 1, cfg.alpha), hyp))
        active &= torch.tensor([len(f) < k for f in finished], device=device)
        if not bool(active.any()):
            break
        # the K best continuations that are not EOS stay alive
        order = (rank + is_eos.long() * 4 * k).argsort(dim=1)[:, :k]
        alive_scores = cand_scores.gather(1, order).masked_fill(is_eos.gather(1, order), -math.inf)
        src_rows = (torch.arange(b, device=device)[:, None] * k + cand_beam.gather(1, order)).view(-1)
        state.reorder(src_rows)
        seqs = torch.cat([seqs[src_rows], cand_tok.gather(1, order).view(-1, 1)], dim=1)
        scores = alive_scores.masked_fill(~active[:, None], -math.inf)
    best = []
    for i in range(b):
        if not finished[i]:  # only when the loop ran zero steps; keep the best live prefix
            finished[i].append((0.0, seqs[i * k].tolist()[1:]))
        best.append(max(finished[i], key=lambda sh: sh[0])[1])
    return best


def search(model: TransformerNMT, src: Tensor, src_feats: dict[str, Tensor],
           cfg: SearchConfig) -> list[list[int]]:
    """Greedy when ``cfg.beam == 1``, beam search otherwise."""
    return (greedy_search if cfg.beam <= 1 else beam_search)(model, src, src_feats, cfg)

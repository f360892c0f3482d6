"""``dbsa_enc`` / ``dbsa_dec`` — dependency-based self-attention (Deguchi et al. 2019, §3).

In self-attention layer ``p`` (``--dbsa-enc-layer`` / ``--dbsa-dec-layer``, 1-based, paper:
p_e = p_d = 4 of 6) one head is replaced by a *parse head* that learns to point every token at
its dependency head:

    Q_parse = S W^Qparse,  K_parse = S W^Kparse,  V_parse = S W^Vparse      (Eqs. 11–13)
    A_parse = softmax(Q_parse U^(1) K_parse^T / √d_k + K_parse u)           (Eq. 14, see below)
    A_parse[t, q] = P(q = head(t) | X),  the root points to itself          (Eq. 15)
    M_parse = A_parse V_parse                                                (Eq. 16)
    M = W^M [M_parse; M_2; …; M_H]   (head 0 replaced; Eq. 17 lists M_parse first)

and training minimises ``e_tokens + λ_enc e_parse_enc + λ_dec e_parse_dec`` (Eq. 18): label-
smoothed token cross-entropy plus the cross-entropy of the parse heads against the parser's
trees (``--dbsa-lambda-enc/-dec``, paper 1.0). Translation needs no parser: the trees are only
supervision (``trains_on_source_trees``; the target side only exists in training).

**Where we follow the authors' fairseq plugin (de9uch1/dbsa) rather than the letter of Eq. 14.**

* The second bi-affine term. Eq. 14 writes ``Q_parse U^(2)`` with ``U^(2) = (u … u)``: that adds
  ``q_t · u`` to every column of row t, which the row softmax cancels (u would get no gradient).
  The plugin (``dbsa/modules/dbsa.py``) adds ``K u`` — a score for *being a head*, Dozat and
  Manning's head bias — and so do we.
* Scaling: like the plugin, the bilinear term is computed on ``Q / √d_k``; the bias is unscaled.
* Parameters: the plugin carves the parse head out of the layer's own projections; we give it
  its own ``W^Qparse, W^Kparse, W^Vparse ∈ R^{d × d_k}`` (Eqs. 11–13). The layer's own head 0
  is computed and dropped (``HeadOverride``), so its W^Q/W^K/W^V slice gets no gradient.
* Loss normalisation: the plugin's parse loss is a mean over supervised tokens times the
  batch's target tokens, i.e. per target token it is ``λ · mean parse CE``; ours is the same
  (``AuxiliaryLoss``). The plugin's λ default is 0.5; the paper's (and ours) 1.0.
* The parse head has no attention dropout (the plugin applies the layer's; ours is 0 by default).

**Candidates and special tokens.** The softmax runs over every non-padding key, EOS included on
the source side and BOS on the target side (causally masked there). EOS (source) and BOS
(target) have no head: they point nowhere, their rows get no loss and are not scored.

**Subwords (Fig. 4).** The word tree is projected by the chain rule of :mod:`depnmt.core.trees`:
every non-final piece of a word points to the next piece, the final piece takes the word's head,
landing on the head word's ``last`` piece (``--dbsa-chain-head``, default ``last``, as for every
tree scheme's ``--chain-head``: in the projected tree a word is its last piece, the one that
carries the word's own arc) or ``first`` piece (the plugin's ``scripts/bpe_dependency.py``, and
depnmt 0.1.0's default, which the 0.1.0 spellings of the DBSA schemes keep); the root's final
piece points to itself. Without BPE (``depnmt bpe --mode word``, Table 3 "w/o BPE") this is the
word tree.
A source truncated to ``--max-len`` keeps the arcs inside the kept part; arcs leaving it get no
loss.

**Decoder side (Fig. 3).** The decoder's parse head attends causally: row t (the decoder input
``BOS y_1 … y_{t}``, so row t is token y_t and row 0 is BOS) sees keys 0..t only, and its keys
and values are cached for incremental decoding like the other heads. A token whose head lies
in the future (after it) cannot point at it: **that token's parse loss is dropped** (the plugin
keeps exactly the pairs with head position ≤ token position). With BPE this drops every chain
arc of a non-final piece (it points at the next piece); a word's arc sits on its final piece.
Rows are aligned with the decoder *input* (row t holds y_t) as in Fig. 3; the plugin aligns them
with the output (the state that emits y_t, which has not seen it yet).

**Word-level heads (UAS, induced trees).** A word's head distribution is its final piece's
parse distribution summed over the pieces of each word; the mass on its own word's pieces
(self-loop included) is the root's, the EOS/BOS mass is dropped. Dev UAS (printed and logged by
``train`` as ``dev_uas_enc``, ``dev_uas_dec`` over all target words, ``dev_uas_dec_visible`` over
words whose head is not in the future) compares its argmax with the parser's tree.
``depnmt translate --induced-trees FILE`` writes the maximum spanning tree of those word scores
(Chu–Liu/Edmonds, with the single-root constraint enforced by a constant penalty on root arcs),
so every written tree is valid CoNLL-U; when the argmax already is a tree, it is the argmax.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, make_dataclass
from functools import partial
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from depnmt.core.conllu import Sentence, sentence_error
from depnmt.core.device import autocast_dtype
from depnmt.core.errors import DepnmtError
from depnmt.core.subwords import merge_subwords, word_index, word_spans
from depnmt.core.trees import CHAIN_HEADS, max_spanning_tree, project_tree
from depnmt.model.attention import (AttentionTerms, HeadOverride, HeadResult, KeyValues,
                                    MultiHeadAttention, stacked_linears)
from depnmt.model.derived import Derived
from depnmt.model.packed import PackedWeights
from depnmt.model.schemes.base import (AuxiliaryLoss, Extras, ModelDims, Scheme, SchemeModule,
                                       masked_sum)
from depnmt.model.schemes.options import Choice, FloatRange, IntRange, option
from depnmt.model.schemes.registry import register

PARSE_HEAD = 0          # the head M_parse replaces (Eq. 17 lists it first; the plugin: head 0)



SCORERS = ("biaffine", "deep")


@dataclass
class DBSAOptions:
    dbsa_chain_head: str = option("last", "DBSA on BPE (Fig. 4): a word's arc lands on the head "
                                  "word's last or first piece (first: the plugin's "
                                  "bpe_dependency.py)", Choice(CHAIN_HEADS))
    dbsa_scorer: str = option("biaffine", "parse head's scores: biaffine (DBSA, Eq. 14) or deep "
                              "(LISA as the PASCAL fork implements it: leaky-ReLU projections, "
                              "no 1/sqrt(d_k))", Choice(SCORERS))
    dbsa_heads: int = option(1, "DBSA: number of parse heads (heads 0 … N−1 of the layer; the "
                             "plugin's --dependency-heads): one bi-affine over their queries, "
                             "A_parse = the mean of their distributions", IntRange(min=1))


def side_options(side: str, stack: str, trees: str) -> type:
    """The options of DBSA on one side (``side`` enc or dec): the 1-based layer p of the
    ``stack`` (encoder/decoder) whose head 0 is the parse head (paper §4.1: 4) and the weight λ
    of the ``trees`` (source/target) parse loss (Eq. 18; paper §4.2: 1.0)."""
    layer = option(4, f"dbsa_{side}: {stack} layer p_{side[0]} (1-based) whose head 0 is the "
                   "parse head (paper §4.1: 4)", IntRange(min=1))
    weight = option(1.0, f"dbsa_{side}: weight λ_{side} of the {trees} parse loss (Eq. 18; "
                    "paper §4.2: 1.0)", FloatRange(min=0))
    return make_dataclass(f"DBSA{stack.capitalize()}Options",
                          [(f"dbsa_{side}_layer", int, layer),
                           (f"dbsa_lambda_{side}", float, weight)], bases=(DBSAOptions,))


DBSAEncoderOptions = side_options("enc", "encoder", "source")
DBSADecoderOptions = side_options("dec", "decoder", "target")


SIDE_NAMES = {"src": "enc", "tgt": "dec"}


# -- supervision ------------------------------------------------------------------------------

def parse_targets(heads: list[int], subwords: list[str], kept: int, offset: int, length: int,
                  chain_head: str) -> dict[str, Tensor]:
    """Per-position supervision for ``length`` positions whose ``offset``-th holds subword 0.

    ``head [length]``: 1 + the position of the gold head (the root: itself), 0 = no supervision
    (specials, padding, arcs leaving the first ``kept`` subwords). ``word [length]``: 1 + the
    word index of each subword position, 0 for specials.
    """
    tree = project_tree(heads, subwords, "chain", chain_head)
    words = word_index(subwords)
    head = torch.zeros(length, dtype=torch.long)
    word = torch.zeros(length, dtype=torch.long)
    for s in range(min(kept, len(subwords))):
        target = s if tree.heads[s] == 0 else tree.heads[s] - 1     # Eq. 15: root -> itself
        if target < kept:
            head[offset + s] = offset + target + 1
        word[offset + s] = words[s] + 1
    return {"head": head, "word": word}


def word_head_bins(probs: Tensor, word: Tensor) -> Tensor:
    """``probs [B, L, L]`` summed over the pieces of each word: ``[B, L, W + 1]``, bin 0 = the
    mass on special positions, bin w = word w (1-based)."""
    b, l, _ = probs.shape
    n = int(word.max()) + 1 if word.numel() else 1
    index = word[:, None, :].expand(b, l, l)
    return probs.new_zeros(b, l, n).scatter_add_(2, index, probs)


def word_final(word: Tensor) -> Tensor:
    """``[B, L]`` bool: the last piece of every word."""
    return (word > 0) & (word != F.pad(word[:, 1:], (0, 1)))


def uas_counts(log_probs: Tensor, head: Tensor, word: Tensor, causal: bool) -> dict[str, tuple[int, int]]:
    """Word-level UAS of the argmax of ``log_probs [B, L, L]`` against the gold ``head`` /
    ``word`` features (see the module docstring): ``{"": (correct, total)}`` and, with
    ``causal``, ``{"_visible": ...}`` over words whose head is not in the future."""
    bins = word_head_bins(log_probs.detach().float().exp(), word)
    bins[..., 0] = -1.0                                       # EOS/BOS are no word's head
    pred = bins.argmax(-1)                                    # own word = root
    gold = word.gather(1, (head - 1).clamp(min=0))            # root: its own word
    scored = word_final(word) & (head > 0)
    correct = scored & (pred == gold)
    out = {"": (int(correct.sum()), int(scored.sum()))}
    if causal:
        visible = head - 1 <= torch.arange(head.shape[1], device=head.device)
        out["_visible"] = (int((correct & visible).sum()), int((scored & visible).sum()))
    return out


# -- trees from scores ------------------------------------------------------------------------

def induced_tree(log_probs: Tensor, subwords: list[str]) -> Sentence:
    """The word tree of one sentence from its parse head's ``log_probs [≥n, ≥n]`` over the
    ``n = len(subwords)`` subword positions (extra positions — EOS, padding — are ignored)."""
    spans = word_spans(subwords)
    words = merge_subwords(subwords)
    if not spans:
        return Sentence.empty()
    n = len(subwords)
    probs = log_probs[:n, :n].detach().float().cpu().exp()
    word = torch.tensor(word_index(subwords))
    finals = torch.tensor([end - 1 for _, end in spans])
    mass = torch.zeros(len(spans), len(spans)).index_add_(1, word, probs[finals])   # [W, W]
    logm = mass.clamp(min=1e-12).log().numpy()
    scores = np.zeros((len(spans) + 1, len(spans) + 1))
    scores[1:, 1:] = logm                                  # the diagonal is ignored
    scores[1:, 0] = np.diag(logm)                          # own word = root
    heads = max_spanning_tree(scores)
    return Sentence(words, heads, ["root" if h == 0 else "dep" for h in heads])


# -- the module -------------------------------------------------------------------------------

def full_precision(device: torch.device) -> Any:
    """A context in which ``device``'s autocast is off (nothing to turn off on devices without
    autocast, e.g. ``meta``)."""
    available = getattr(torch.amp, "is_autocast_available", None)    # torch >= 2.4
    if available(device.type) if available else device.type in ("cpu", "cuda"):
        return torch.autocast(device.type, enabled=False)
    return contextlib.nullcontext()


class ParseHead(nn.Module):
    """W^Qparse, W^Kparse, W^Vparse ∈ R^{d × d_k} (Eqs. 11–13), U^(1) ∈ R^{d_k × d_k} and u ∈
    R^{d_k} (Eq. 14).

    ``n_heads`` > 1 (``--dbsa-heads``): the plugin's ``dependency_heads``
    (de9uch1/dbsa, ``dbsa/modules/dbsa.py``): the projections are ``n·d_k`` wide, one
    U^(1) ∈ R^{n·d_k × n·d_k} transforms the queries of all n heads together (so head h's score
    is ``(Q U1)_h K_h^T``), the key bias ``K u`` (u ∈ R^{n·d_k}) is added to every head, each
    head has its own softmax, and A_parse — supervised by Eq. 18, read for trees and UAS — is
    the mean of the n heads' distributions (the plugin's ``attn[:dependency_heads].mean(0)``).

    ``deep``: LISA's deep bi-affine scorer as the PASCAL authors' fork implements it for MT
    (e-bug/pascal, ``fairseq/modules/multihead_lisa.py``: ``lisa_proj`` then ``leaky_relu``,
    ``[q; 1] W k^T`` with ``W ∈ R^{(d_k+1) × d_k}``): ``s_tq = σ(q_t) U1 σ(k_q)^T + σ(k_q) u``
    with σ = leaky ReLU (slope 0.01) and no 1/√d_k; the bias row of W is u here."""

    def __init__(self, d_model: int, d_k: int, deep: bool = False, n_heads: int = 1):
        super().__init__()
        self.d_k, self.deep, self.n_heads = d_k, deep, n_heads
        width = d_k * n_heads
        self.q_proj, self.k_proj, self.v_proj = (nn.Linear(d_model, width) for _ in range(3))
        for proj in (self.q_proj, self.k_proj, self.v_proj):
            nn.init.xavier_uniform_(proj.weight)
        self.u1 = nn.Parameter(nn.init.xavier_uniform_(torch.empty(width, width), gain=2 ** -0.5))
        self.u = nn.Parameter(torch.zeros(width))         # the plugin's init (bias_biaffine = 0)
        self._derived = Derived()                         # decoding: the stacked projections

    def fused_qkv(self, dtype: torch.dtype | None) -> PackedWeights:
        """W^Qparse, W^Kparse, W^Vparse stacked ``[3·n·d_k, d]`` with their biases, in ``dtype``
        (autocast's, so that no step casts them again; None: as they are), packed for the CPU's
        kernels: a decoding step of the deep scorer projects its position by one matrix
        multiply (kept while the weights are unchanged)."""
        projs = (self.q_proj, self.k_proj, self.v_proj)
        return self._derived.get(("qkv", dtype), [t for p in projs for t in (p.weight, p.bias)],
                                 lambda: PackedWeights(*stacked_linears(projs, dtype)))

    def step_weights(self, dtype: torch.dtype | None) -> PackedWeights:
        """The bi-affine scorer's map from a position's input ``x`` to all that a decoding step
        needs of it, ``[q / √d_k | kt_1 … kt_n | v | K u]``: one linear layer, weights
        ``[n·d_k + n·n·d_k + n·d_k + 1, d]`` with biases, in ``dtype`` (kept while the
        parameters are unchanged). Eq. 14's U^(1) and u are folded into the keys' projection
        (:meth:`key_terms` by associativity): ``kt_h = K_h U1[:, h]^T = x (U1[:, h] W^K_h)^T
        + U1[:, h] b^K_h`` and ``K u = x (u^T W^K)^T + u·b^K``, with U1[:, h] the columns and
        W^K_h, b^K_h the rows of head h."""
        params = [self.u1, self.u] + [t for p in (self.q_proj, self.k_proj, self.v_proj)
                                      for t in (p.weight, p.bias)]

        def build() -> PackedWeights:
            with full_precision(self.u1.device):
                scale, heads = math.sqrt(self.d_k), range(self.n_heads)
                cols = [slice(h * self.d_k, (h + 1) * self.d_k) for h in heads]
                wk, bk = self.k_proj.weight, self.k_proj.bias
                weight = torch.cat([self.q_proj.weight / scale,
                                    *(self.u1[:, c] @ wk[c] for c in cols),
                                    self.v_proj.weight, (self.u @ wk)[None]])
                bias = torch.cat([self.q_proj.bias / scale, *(self.u1[:, c] @ bk[c] for c in cols),
                                  self.v_proj.bias, (self.u @ bk)[None]])
            return PackedWeights(*((weight, bias) if dtype is None
                                   else (weight.to(dtype), bias.to(dtype))))
        return self._derived.get(("step", dtype), params, build)

    def step(self, x: Tensor, dtype: torch.dtype | None) -> tuple[Tensor, Tensor]:
        """A decoding step's new positions ``x [N, T, d]``: their queries ``[N, T, n·d_k]`` as
        :meth:`query_log_probs` reads them and their :class:`ParseKeys` rows, both in fp32, by
        one matrix multiply in ``dtype`` (the bi-affine scorer's :meth:`step_weights`; the
        deep scorer's :meth:`fused_qkv`, then its key terms)."""
        if self.deep:
            q, k, v = self.fused_qkv(dtype)(x).chunk(3, dim=-1)
            return F.leaky_relu(q.float()), ParseKeys.new_rows(self, k, v)
        out = self.step_weights(dtype)(x).float()
        width = self.n_heads * self.d_k
        return out[..., :width], out[..., width:]

    def key_terms(self, k: Tensor) -> tuple[Tensor, Tensor]:
        """What Eq. 14 (or LISA's scorer) computes of keys ``k [B, Tk, n·d_k]`` alone, in fp32:
        ``kt [B, Tk, n, n·d_k]`` with ``kt_h = K_h U1[:, h]^T`` (U1's columns of head h), so
        that head h's ``(Q U1)_h K_h^T = Q kt_h^T``, and the key bias ``K u`` ``[B, Tk, 1]``.
        (A decoding step gets them of its own positions from :meth:`step`.)"""
        with full_precision(k.device):
            k = F.leaky_relu(k.float()) if self.deep else k.float()
            (b, tk, _), n = k.shape, self.n_heads
            heads = k.view(b, tk, n, self.d_k).unsqueeze(-2)            # [B, Tk, n, 1, d_k]
            u1 = self.u1.view(-1, n, self.d_k).permute(1, 2, 0)         # [n, d_k, n·d_k]
            return (heads @ u1).squeeze(-2), (k @ self.u)[..., None]

    def query_log_probs(self, q: Tensor, keys: "ParseKeys", mask: Tensor | None) -> Tensor:
        """:meth:`head_log_probs` ``[B, n, Tq, Tk]`` of a step's queries ``q [B, Tq, n·d_k]``
        (:meth:`step`'s, fp32) from the cached key terms (the same values up to fp32
        rounding: ``Q (K U1^T)^T`` for ``(Q U1) K^T``)."""
        with full_precision(q.device):
            scores = q.unsqueeze(1) @ keys.kt.permute(0, 2, 3, 1)               # [B, n, Tq, Tk]
            return masked_log_softmax(scores + keys.bias[:, None, None, :], mask)

    def head_log_probs(self, q: Tensor, k: Tensor, mask: Tensor | None) -> Tensor:
        """``log A_h [B, n, Tq, Tk]`` (float32), one distribution per parse head, from
        ``q [B, Tq, n·d_k]``, ``k [B, Tk, n·d_k]``; ``mask`` (True = may attend)
        broadcastable to ``[B, 1, Tq, Tk]``. Computed in fp32 under autocast too: the parse
        distributions, the UAS and the induced trees are those of fp32 training."""
        with full_precision(q.device):
            return self._head_log_probs(q.float(), k.float(), mask)

    def _head_log_probs(self, q: Tensor, k: Tensor, mask: Tensor | None) -> Tensor:
        """:meth:`head_log_probs` of fp32 ``q``, ``k`` (Eq. 14, or LISA's scorer)."""
        if self.deep:                                          # LISA: σ(Q) U1 σ(K)^T + σ(K) u
            q, k = F.leaky_relu(q), F.leaky_relu(k)
        else:
            q = q / math.sqrt(self.d_k)
        bias = (k @ self.u)[:, None, :]                                     # + K u (head bias)
        if self.n_heads == 1:
            scores = (q @ self.u1 @ k.transpose(1, 2) + bias).unsqueeze(1)  # Q U1 K^T
        else:
            (b, tq, _), tk = q.shape, k.shape[1]
            qw = (q @ self.u1).view(b, tq, self.n_heads, self.d_k).transpose(1, 2)
            kh = k.view(b, tk, self.n_heads, self.d_k).transpose(1, 2)
            scores = qw @ kh.transpose(-1, -2) + bias[:, None]
        return masked_log_softmax(scores, mask)

    def log_probs(self, q: Tensor, k: Tensor, mask: Tensor | None) -> Tensor:
        """``log A_parse [B, Tq, Tk]`` (see :func:`parse_log_probs`)."""
        return parse_log_probs(self.head_log_probs(q, k, mask))


def masked_log_softmax(scores: Tensor, mask: Tensor | None) -> Tensor:
    """``log_softmax`` over keys of ``scores [B, n, Tq, Tk]``, -inf where ``mask`` (True = may
    attend, broadcastable to ``[B, 1, Tq, Tk]``) is False."""
    if mask is not None:
        if mask.dim() == 4:
            mask = mask[:, 0]
        scores = scores.masked_fill(~mask.unsqueeze(-3), float("-inf"))
    return torch.log_softmax(scores, dim=-1)


@dataclass
class ParseKeys:
    """A causal parse head's cache during incremental decoding: per hypothesis (row) and
    position seen so far its key terms (:meth:`ParseHead.key_terms`), its value and its key
    bias in one fp32 tensor ``rows [N, Tk, n·n·d_k + n·d_k + 1]``, so that a step computes the
    terms of its own position only and a beam step reorders one tensor."""

    rows: Tensor
    n_heads: int

    @classmethod
    def of(cls, head: ParseHead, keys: KeyValues) -> "ParseKeys":
        """From the keys/values a full pass (the first step) returned."""
        return cls(cls.new_rows(head, keys.k, keys.v), head.n_heads)

    @staticmethod
    def new_rows(head: ParseHead, k: Tensor, v: Tensor) -> Tensor:
        """``[N, T, ...]`` of positions with keys ``k`` and values ``v`` ``[N, T, n·d_k]``."""
        kt, bias = head.key_terms(k)
        return torch.cat([kt.flatten(-2), v.float(), bias], dim=-1)

    def extend(self, rows: Tensor) -> "ParseKeys":
        """These positions followed by new ones (their ``rows [N, T, ...]``)."""
        return ParseKeys(torch.cat([self.rows, rows], dim=1), self.n_heads)

    def select(self, index: Tensor) -> "ParseKeys":
        """Rows ``index`` (beam search keeps hypotheses ``index``)."""
        return ParseKeys(self.rows.index_select(0, index), self.n_heads)

    @property
    def width(self) -> int:
        """n·d_k."""
        return (self.rows.shape[-1] - 1) // (self.n_heads + 1)

    @property
    def kt(self) -> Tensor:
        """``[N, Tk, n, n·d_k]``: each head's key terms."""
        return self.rows[..., :self.n_heads * self.width].unflatten(-1, (self.n_heads, -1))

    @property
    def v(self) -> Tensor:
        """``[N, Tk, n·d_k]``: the values."""
        return self.rows[..., self.n_heads * self.width:-1]

    @property
    def bias(self) -> Tensor:
        """``[N, Tk]``: the key bias ``K u``."""
        return self.rows[..., -1]


def parse_log_probs(per_head: Tensor) -> Tensor:
    """``log A_parse [B, Tq, Tk]`` from the heads' ``[B, n, Tq, Tk]``: the log of their mean
    distribution (one head: its log-softmax as it is)."""
    if per_head.shape[1] == 1:
        return per_head[:, 0]
    return torch.logsumexp(per_head, dim=1) - math.log(per_head.shape[1])


class DBSAModule(SchemeModule):
    """One parse head in layer ``layer`` (0-based) of ``side``'s self-attention; its log A_parse
    of a full (non-incremental) pass is reported in the pass's extras as ``parse_{enc,dec}``."""

    def __init__(self, dims: ModelDims, side: str, layer: int, weight: float, chain_head: str,
                 scorer: str = "biaffine", n_heads: int = 1):
        super().__init__()
        self.side, self.layer, self.weight, self.chain_head = side, layer, weight, chain_head
        self.name = f"parse_{SIDE_NAMES[side]}"
        self.parse = ParseHead(dims.d_model, dims.d_k, deep=scorer == "deep", n_heads=n_heads)
        self.gold_arcs = False      # translate --dbsa-gold-arcs: the gold tree replaces A_parse

    def attention_terms(self, side: str, layer: int, feats: dict[str, Tensor], q_pos: Tensor,
                        k_pos: Tensor) -> AttentionTerms | None:
        """Heads ``PARSE_HEAD … PARSE_HEAD + n − 1`` replaced by the parse heads."""
        if side != self.side or layer != self.layer:
            return None
        gold = feats.get(f"dbsa_{self.side}_head") if self.gold_arcs else None
        return AttentionTerms([], None, [HeadOverride(PARSE_HEAD, partial(self._heads, gold),
                                                      self.name, self.parse.n_heads)])

    def _heads(self, gold: Tensor | None, query: Tensor, kv: Tensor, mask: Tensor | None,
               past: KeyValues | None) -> HeadResult:
        """The n parse heads in one call: ``M_parse = A_parse V_parse`` (Eq. 16) of each,
        ``[B, n, Tq, d_k]``, with ``log A_parse`` (the heads' mean). With ``gold`` (``[B, Tq]``,
        1 + the gold head's position, 0 = none) the plugin's ``gold_dependency``
        (``dbsa/modules/dbsa.py``): every head's weights are 1 on each position's gold head and
        0 elsewhere (positions without one — EOS, padding — get all zeros)."""
        if past is not None and gold is None:        # a decoding step: key terms cached
            return self._step(query, mask, past)
        q, k, v = self.parse.q_proj(query), self.parse.k_proj(kv), self.parse.v_proj(kv)
        keys = KeyValues(k, v) if past is None else past.extend(k, v)   # causal heads: cached
        per_head = self.parse.head_log_probs(q, keys.k, mask)                # [B, n, Tq, Tk]
        log_probs = parse_log_probs(per_head)
        if gold is None:
            probs = per_head.exp()
        else:
            probs = (F.one_hot((gold - 1).clamp(min=0), keys.k.shape[1])
                     * (gold > 0)[..., None]).unsqueeze(1)                   # [B, 1, Tq, Tk]
        return HeadResult(self._mix(probs, keys.v), keys, log_probs)

    def _step(self, new: Tensor, mask: Tensor | None, past: KeyValues | ParseKeys) -> HeadResult:
        """:meth:`_heads` of a decoding step's new positions ``new [B, T, D]`` given the cache
        of the earlier ones (the first step's :class:`KeyValues`, then :class:`ParseKeys`):
        one matrix multiply gives the new positions' queries and cache rows
        (:meth:`ParseHead.step`)."""
        q, rows = self.parse.step(new, autocast_dtype(new.device.type))
        keys = past if isinstance(past, ParseKeys) else ParseKeys.of(self.parse, past)
        keys = keys.extend(rows)
        per_head = self.parse.query_log_probs(q, keys, mask)                 # [B, n, T, Tk]
        with full_precision(new.device):        # fp32 values: 3.5x faster than autocast's
            out = self._mix(per_head.exp(), keys.v)                          # bf16 copies
        return HeadResult(out, keys, parse_log_probs(per_head))

    def _mix(self, probs: Tensor, values: Tensor) -> Tensor:
        """Eq. 16 of each head: ``probs [B, n|1, Tq, Tk]`` times values ``[B, Tk, n·d_k]`` ->
        ``[B, n, Tq, d_k]``, in the values' dtype."""
        (b, tk, _), n = values.shape, self.parse.n_heads
        value = values.view(b, tk, n, self.parse.d_k).transpose(1, 2)        # [B, n, Tk, d_k]
        return probs.to(value.dtype) @ value

    def imitate(self, attn: MultiHeadAttention) -> None:
        """Make the parse heads compute what the heads they replace compute: W^Qparse,
        W^Kparse, W^Vparse := the rows of heads ``PARSE_HEAD … PARSE_HEAD + n − 1`` in
        ``attn``'s W^Q, W^K, W^V (the self-attention of this layer), U^(1) := I and u := 0, so
        that Eq. 14 is Eq. 2's ``softmax(q k^T / √d_k)`` and the model computes the function
        of the same weights without parse heads (bi-affine scorer only: LISA's leaky ReLU
        cannot be undone). ``bench/decode.py`` grafts an abs model's weights this way, so
        that both decode the same hypotheses and their speeds compare the same work."""
        if self.parse.deep:
            raise ValueError("the deep scorer's leaky ReLU cannot compute a dot-product head")
        rows = slice(PARSE_HEAD * attn.d_k, (PARSE_HEAD + self.parse.n_heads) * attn.d_k)
        with torch.no_grad():
            for own, theirs in ((self.parse.q_proj, attn.q_proj), (self.parse.k_proj, attn.k_proj),
                                (self.parse.v_proj, attn.v_proj)):
                own.weight.copy_(theirs.weight[rows])
                own.bias.copy_(theirs.bias[rows])
            self.parse.u1.copy_(torch.eye(self.parse.u1.shape[0]))
            self.parse.u.zero_()

    def _gold(self, extras: Extras, src_feats: dict[str, Tensor], tgt_feats: dict[str, Tensor]):
        """``(log A_parse, gold head, gold word)`` of this side, or None (no scores, no trees)."""
        feats = src_feats if self.side == "src" else tgt_feats
        key = f"dbsa_{self.side}_head"
        if self.name not in extras.scores or key not in feats:
            return None
        return extras.scores[self.name], feats[key], feats[f"dbsa_{self.side}_word"]

    def auxiliary_losses(self, extras: Extras, src_feats: dict[str, Tensor],
                         tgt_feats: dict[str, Tensor]) -> dict[str, AuxiliaryLoss]:
        """``e_parse``: mean cross-entropy of the gold heads (Eq. 18); on the decoder side,
        tokens whose head lies in the future are left out."""
        gold = self._gold(extras, src_feats, tgt_feats)
        if gold is None:
            return {}
        log_probs, head = gold[0], gold[1]
        supervised = head > 0
        if self.side == "tgt":
            supervised &= head - 1 <= torch.arange(head.shape[1], device=head.device)
        nll = -log_probs.gather(-1, (head - 1).clamp(min=0).unsqueeze(-1)).squeeze(-1)
        value = masked_sum(nll, supervised) / supervised.sum().clamp(min=1)
        return {self.name: AuxiliaryLoss(value, self.weight)}

    def validation_counts(self, extras: Extras, src_feats: dict[str, Tensor],
                          tgt_feats: dict[str, Tensor]) -> dict[str, tuple[int, int]]:
        gold = self._gold(extras, src_feats, tgt_feats)
        if gold is None:
            return {}
        counts = uas_counts(*gold, causal=self.side == "tgt")
        return {f"uas_{SIDE_NAMES[self.side]}{k}": v for k, v in counts.items()}

    def induced_target_trees(self, extras: Extras,
                             subwords: list[list[str]]) -> list[Sentence] | None:
        """DBSA(Dec)'s trees over hypotheses: position 0 of the teacher-forced pass is BOS, so
        subword s sits at position s + 1; each word's head is chosen among the words before it
        and itself (the causal head sees no later word; the maximum spanning tree then keeps
        the best valid tree)."""
        log_probs = extras.scores.get(self.name)
        if self.side != "tgt" or log_probs is None:
            return None
        return [induced_tree(log_probs[i, 1:, 1:], pieces) for i, pieces in enumerate(subwords)]

    def induced_source_trees(self, extras: Extras, examples: list[Any]) -> list[Sentence] | None:
        log_probs = extras.scores.get(self.name)
        if self.side != "src" or log_probs is None:
            return None
        return [induced_tree(log_probs[i], ex.src_subwords[: len(ex.src) - 1])
                for i, ex in enumerate(examples)]


# -- schemes ----------------------------------------------------------------------------------

class DBSAScheme(Scheme):
    side: ClassVar[str]

    @property
    def layer_option(self) -> str:
        return f"dbsa_{SIDE_NAMES[self.side]}_layer"

    def check(self, dims: ModelDims) -> None:
        layers = dims.encoder_layers if self.side == "src" else dims.decoder_layers
        layer = self.option(self.layer_option)
        if not 1 <= layer <= layers:
            which = "encoder" if self.side == "src" else "decoder"
            raise DepnmtError(f"--{self.layer_option.replace('_', '-')} {layer}: the {which} has "
                              f"{layers} layer{'s' * (layers != 1)} (choose 1..{layers})")
        if self.option("dbsa_heads") > dims.n_heads:
            raise DepnmtError(f"--dbsa-heads {self.option('dbsa_heads')} exceeds the "
                              f"{dims.n_heads} attention heads")

    def features(self, tree: Any, subwords: list[str], kept: int, offset: int, length: int,
                 index: int) -> dict[str, Tensor]:
        if tree is None:
            return {}
        try:
            feats = parse_targets(list(tree.heads), subwords, kept, offset, length,
                                  self.option("dbsa_chain_head"))
        except ValueError as exc:
            raise sentence_error(tree, index + 1, f"{exc} ({self.side} side)") from None
        return {f"dbsa_{self.side}_{k}": v for k, v in feats.items()}

    def build(self, dims: ModelDims) -> SchemeModule:
        self.check(dims)
        weight = self.option(f"dbsa_lambda_{SIDE_NAMES[self.side]}")
        return DBSAModule(dims, self.side, self.option(self.layer_option) - 1, weight,
                          self.option("dbsa_chain_head"), self.option("dbsa_scorer"),
                          self.option("dbsa_heads"))


@register
class DBSAEncoder(DBSAScheme):
    name = "dbsa_enc"
    help = "Deguchi et al. (2019) DBSA(Enc): a source parse head in encoder layer p_e"
    side = "src"
    trains_on_source_trees = True
    Options = DBSAEncoderOptions

    def source_features(self, example: Any) -> dict[str, Tensor]:
        """Gold heads of the ``len(example.src)`` source positions (subwords, then EOS); none
        without a tree (translate)."""
        return self.features(example.src_tree, example.src_subwords, len(example.src) - 1, 0,
                             len(example.src), example.index)


@register
class DBSADecoder(DBSAScheme):
    name = "dbsa_dec"
    help = "Deguchi et al. (2019) DBSA(Dec): a causal target parse head in decoder layer p_d"
    side = "tgt"
    needs_target_trees = True
    Options = DBSADecoderOptions

    def target_features(self, example: Any) -> dict[str, Tensor]:
        """Gold heads of the ``len(example.tgt) + 1`` decoder inputs (BOS, then the target)."""
        return self.features(example.tgt_tree, example.tgt_subwords, len(example.tgt), 1,
                             len(example.tgt) + 1, example.index)

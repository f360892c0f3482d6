"""Multi-head attention (Vaswani et al. 2017, Eqs. 1–4 in Omote et al. 2019) with pluggable
relative terms and additive logit biases.

A positional scheme never touches this module's code; it hands over:

* :class:`RelativeTerm` — per-pair label indices ``[B, Tq, Tk]`` (or ``[Tq, Tk]`` shared by the
  batch) and learned tables ``a^K``, ``a^V`` of shape ``[R, d_k]`` (Shaw et al. 2018, Omote et al.
  2019 Eqs. 11–22).  Label 0 is reserved for "no term" (its table rows are zero and receive no
  gradient), so padding, special tokens and ``non_dep`` pairs add nothing. When the label of a
  pair is a function of a small per-token class of each side (Omote's depth difference), the
  term also carries those classes (:class:`LabelFactors`);
* an additive logit bias ``[B, H or 1, Tq, Tk]`` (masks), or one given as a product of
  per-token factors, :class:`LowRankLogits` (GPS's decoupled syntax logits);
* a multiplicative logit scale ``[B, H or 1, Tq, Tk]`` (PASCAL's parent-scaled heads, Bugliarello
  & Okazaki 2020): ``e = (content + relative key terms) / √d_k ⊙ scale + bias``.
* :class:`HeadOverride` — a head the scheme computes itself (e.g. a parse head, Deguchi et al.
  2019 Eqs. 11–17): its ``[B, Tq, d_k]`` output replaces head ``h`` in the concatenation before
  ``W^O``, ``W^O [M_1; …; M_override; …; M_H]``. The head returns what it computed
  (:class:`HeadResult`): its output, its keys and values (cached by the decoder during
  incremental decoding) and scores to report (recorded under the override's ``name`` in the
  ``scores`` dict the caller passes, e.g. a parse distribution). When the replaced heads are
  the first or the last ones, the layer attends with its other heads only (slices of its
  queries, keys and values); otherwise, and over a decoding step's cache (whose slices would
  be copies), it computes all heads and drops the replaced ones.

Relative terms use the gather/scatter form (the products with the R table rows, picked by
label), never a ``[B, Tq, Tk, d_k]`` tensor; on an H200 it trained as fast as one-hot matrix
multiplies in its place, or faster (``docs/gpu.md``):

* key term   ``e_ij += q_i · a^K_{l(i,j)}``:   ``(q @ a^K.T)`` is ``[B, H, Tq, R]``, gathered by
``l``;
* value term ``z_i  += Σ_j α_ij a^V_{l(i,j)}``: ``α`` is summed into R bins (scatter_add) and the
  ``[B, H, Tq, R]`` bins are multiplied by ``a^V``.

**Extra head dimensions** (:meth:`MultiHeadAttention._attend_extended`). Factored terms fit one
fused SDPA call exactly, as extra dimensions of the heads (``W`` key classes, ``c(i)`` the query's
class, ``w(j)`` the key's, ``L[c, w]`` the label of a class pair):

* key term:  ``q'_i = [q_i | q_i · a^K_{L[c(i), w]} for w < W]``, ``k'_j = [k_j | onehot(w(j))]``,
  so ``q'_i · k'_j = q_i · k_j + q_i · a^K_{l(i,j)}``;
* value term: ``v'_j = [v_j | onehot(w(j))]``: the extra output columns are the attention mass
  of each key class, ``m_i[w] = Σ_{j: w(j) = w} α_ij``, and ``Σ_w m_i[w] a^V_{L[c(i), w]}`` is
  the value term (the mass summed into label bins as in the explicit path, ``W`` wide, not
  ``Tk``);
* low-rank logits: ``q'_i = [q_i | u_i ⊗ onehot(g(i))]``, ``k'_j = [k_j | t_j ⊗ onehot(g(j))]``
  add ``u_i · t_j`` where the groups ``g`` agree (GPS: the same sentence of a line).

Queries are scaled by ``1/√d_k`` before (SDPA's ``scale=1``), so the logits are the explicit
path's; the widths are padded with zeros to a multiple of 8. It is taken on CUDA (any device but
the CPU) when every term is factored and the heads stay at most :data:`MAX_FUSED_HEAD_DIM` wide;
``DEPNMT_ATTENTION`` (:data:`PATH_SWITCH`) forces it (``fused``, also on the CPU, for tests and
benchmarks) or turns it off (``explicit``). Shaw's clipped ``j − i`` has no such form narrower
than ``Tk`` (the classes would be the key's position): it takes the kernel below.

**The label-bins kernel** (:meth:`MultiHeadAttention._attend_kernel`, :mod:`depnmt.model.kernels`,
Triton, FlashAttention-2's tiling). One relative term whose label depends on the pair (Shaw's
``j − i``, computed in the kernel from the positions a :class:`ClippedDistance` carries; tree
relations, read from the ``[B, Tq, Tk]`` labels as int8) goes inside the fused kernel: the key
term from the per-query row ``q_i · a^K_r`` of every label ``[B, H, Tq, R]`` (a small matrix
multiply before it), the value term as per-query label bins ``β_ir = Σ_{j: l(i,j) = r} α_ij``
rescaled with the output (``z_i = O_i + β_i a^V`` after it); the other terms, if any, as extra
head dimensions of its heads (dep+rel: dep's depths). It is taken without dropout, for padding
and causal masks, heads at most :data:`MAX_KERNEL_HEAD_DIM` wide and at most
:data:`MAX_KERNEL_LABELS` labels: under ``auto`` on a CUDA GPU where Triton runs
(:func:`depnmt.model.kernels.runs_on`), under ``fused`` also on the CPU with Triton's
interpreter (tests). Elsewhere (the CPU, no Triton, dropout, two label tensors as deplabel+rel's)
the paths below.

:func:`reference_attention` writes the same equations literally (einsum over ``[B, Tq, Tk, d_k]``
tensors of the per-pair vectors); every test of the fast paths compares against it
(``tests/unit/test_model.py``, ``test_relative.py``, ``test_dbsa.py``).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from depnmt.core.errors import DepnmtError
from depnmt.model import kernels
from depnmt.model.dropout import dropout
from depnmt.model.packed import PackedWeights

PATH_SWITCH = "DEPNMT_ATTENTION"     # auto | fused | explicit (read at import; see path())
PATHS = ("auto", "fused", "explicit")
attention_path = os.environ.get(PATH_SWITCH, "") or "auto"
MAX_FUSED_HEAD_DIM = 256            # the widest heads of SDPA's flash and cuDNN kernels
MAX_KERNEL_HEAD_DIM = 128           # the widest heads of the label-bins kernel (registers)
MAX_KERNEL_LABELS = 64              # the most labels its bins hold (one pass per label)
KERNEL_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def path() -> str:
    """Which attention path terms may take (:data:`attention_path`, from ``DEPNMT_ATTENTION``):
    ``auto`` — the extra head dimensions on any device but the CPU, where they fit; ``fused``
    — wherever the terms allow them, the CPU included; ``explicit`` — never."""
    if attention_path not in PATHS:
        raise DepnmtError(f"{PATH_SWITCH}={attention_path}: expected one of {', '.join(PATHS)}")
    return attention_path


@dataclass
class LabelFactors:
    """Labels that are a function of a class of each side: ``labels[b, i, j] =
    table[query[b, i], key[b, j]]`` (Omote's depth difference: the classes are the depths).
    The number of key classes ``W`` is ``table``'s width, known on the host."""

    query: Tensor                  # [B, Tq] int64, the query's class (a row of table)
    key: Tensor                    # [B, Tk] int64, the key's class (a column of table)
    table: Tensor                  # [U, W] int64, the label of a (query, key) class pair

    def query_labels(self) -> Tensor:
        """``[B, Tq, W]``: each query's label for every key class."""
        return self.table[self.query]

    def key_onehot(self, dtype: torch.dtype) -> Tensor:
        """``[B, Tk, W]`` in ``dtype``: each key's class, one-hot (by comparison: nothing read
        back from the device)."""
        classes = torch.arange(self.table.shape[1], device=self.key.device)
        return (self.key.unsqueeze(-1) == classes).to(dtype)

    def labels(self) -> Tensor:
        """``[B, Tq, Tk]``: the labels these factors stand for."""
        return self.table[self.query.unsqueeze(-1), self.key.unsqueeze(-2)]


@dataclass
class ClippedDistance:
    """Labels that are a clipped distance of positions, ``labels[i, j] = clip(key[j] − query[i],
    −clip, clip) + clip + 1`` (Shaw et al.'s Eqs. 13–15 in Omote et al.; label 0 stays free),
    which the fused kernel computes from the positions instead of reading ``[Tq, Tk]``."""

    query: Tensor                  # [Tq] int, absolute positions of the queries
    key: Tensor                    # [Tk] int, of the keys
    clip: int                      # k

    def labels(self) -> Tensor:
        """``[Tq, Tk]``: the labels these positions stand for."""
        dist = self.key[None, :] - self.query[:, None]
        return dist.clamp(-self.clip, self.clip) + self.clip + 1


@dataclass
class RelativeTerm:
    """Per-pair labels with their key/value tables (either table may be ``None``: ablations);
    ``factors``, when given, are the same labels as per-token classes (:class:`LabelFactors`),
    ``positions`` the same labels as a clipped distance (:class:`ClippedDistance`)."""

    labels: Tensor                 # [B, Tq, Tk] or [Tq, Tk], int64, 0 = no term
    key_table: Tensor | None       # [R, d_k]  a^K (Shaw) / b^K (Omote)
    value_table: Tensor | None     # [R, d_k]  a^V / b^V
    factors: LabelFactors | None = None
    positions: ClippedDistance | None = None

    def rows(self) -> int:
        """R, the number of labels of the tables."""
        return (self.key_table if self.key_table is not None else self.value_table).shape[0]


@dataclass
class LowRankLogits:
    """An additive logit term ``bias[b, h, i, j] = query[b, h, i] · key[b, h, j]`` where the
    groups of i and j agree and are not 0, else 0 (GPS: ``(s_i W_s^Q / √d_k)(s_j W_s^K)^T`` of
    words of the same sentence). ``groups``: the group ids are ``1 … groups``, a count known on
    the host (None: unknown, and only the dense form is available)."""

    query: Tensor                  # [B, H, Tq, r], as added to the scaled logits
    key: Tensor                    # [B, H, Tk, r]
    query_group: Tensor            # [B, Tq] int, 0 = no term
    key_group: Tensor              # [B, Tk] int
    groups: int | None = None

    def dense(self) -> Tensor:
        """``[B, H, Tq, Tk]``."""
        qg, kg = self.query_group.long(), self.key_group.long()
        same = (qg[:, :, None] == kg[:, None, :]) & (qg[:, :, None] > 0)      # (B, Tq, Tk)
        return (self.query @ self.key.transpose(-1, -2)) * same[:, None].to(self.query.dtype)

    def extended(self) -> tuple[Tensor, Tensor]:
        """``[B, H, Tq, groups · r]`` and ``[B, H, Tk, groups · r]``: each side's factor in the
        slot of its group (zero for group 0), whose dot products are :meth:`dense`."""
        return self._slotted(self.query, self.query_group), self._slotted(self.key, self.key_group)

    def _slotted(self, x: Tensor, group: Tensor) -> Tensor:
        ids = torch.arange(1, self.groups + 1, device=group.device)
        onehot = (group.long().unsqueeze(-1) == ids).to(x.dtype)               # (B, T, G)
        return (x.unsqueeze(-2) * onehot[:, None, :, :, None]).flatten(-2)

    def heads(self, lo: int, hi: int) -> "LowRankLogits":
        return replace(self, query=self.query[:, lo:hi], key=self.key[:, lo:hi])


@dataclass
class KeyValues:
    """Keys and values of the positions seen so far, time on dim -2: ``[N, H, T, d_k]`` for a
    layer's heads, ``[N, T, d_k]`` for one head a scheme computes. Rows are hypotheses."""

    k: Tensor
    v: Tensor

    def extend(self, k: Tensor, v: Tensor) -> "KeyValues":
        """These keys/values followed by those of new positions."""
        return KeyValues(torch.cat([self.k, k], dim=-2), torch.cat([self.v, v], dim=-2))

    def select(self, index: Tensor) -> "KeyValues":
        """Rows ``index`` (beam search keeps hypotheses ``index``; 1-D), by ``index_select``
        (4-5x faster on the CPU than ``k[index]`` for these shapes in isolation)."""
        return KeyValues(self.k.index_select(0, index), self.v.index_select(0, index))


@dataclass
class HeadResult:
    """What a scheme's own head computed."""

    out: Tensor                     # [B, Tq, d_k] (one head) or [B, n, Tq, d_k] (n heads)
    kv: KeyValues                   # its keys/values up to now (the decoder's cache keeps them)
    scores: Tensor | None = None    # to report, e.g. log A_parse [B, Tq, Tk]


@dataclass
class HeadOverride:
    """Heads ``head … head + count − 1`` supplied by a scheme, all computed by one call
    ``compute(query, kv, mask, past) -> HeadResult``.

    ``query [B, Tq, D]`` and ``kv [B, Tk, D]`` are the attention's inputs (the layer input x
    for self-attention), ``mask`` the attention's mask (broadcastable to ``[B, 1, Tq, Tk]``).
    During incremental decoding ``kv`` holds only the new positions and ``past`` the head's
    keys/values of the earlier ones (the :class:`KeyValues` it returned at the last step, None
    at the first); otherwise ``past`` is None. ``name`` labels its scores in the caller's record.
    """

    head: int
    compute: Callable[[Tensor, Tensor, Tensor | None, KeyValues | None], HeadResult]
    name: str = ""
    count: int = 1

    def heads(self) -> range:
        return range(self.head, self.head + self.count)

    def own(self, result: HeadResult) -> Tensor:
        """``result.out`` as ``[B, count, Tq, d_k]``."""
        return result.out.unsqueeze(1) if result.out.dim() == 3 else result.out


@dataclass
class AttentionTerms:
    """What a positional scheme adds to one attention call."""

    relative: list[RelativeTerm]
    logit_bias: Tensor | None = None   # [B, H or 1, Tq, Tk], added to the scaled logits
    head_overrides: list[HeadOverride] = field(default_factory=list)
    logit_scale: Tensor | None = None  # [B, H or 1, Tq, Tk], multiplies the scaled logits
    low_rank: list[LowRankLogits] = field(default_factory=list)   # added to the scaled logits

    def has_bias(self) -> bool:
        """Whether anything is added to the scaled logits (a bias or a low-rank term)."""
        return self.logit_bias is not None or bool(self.low_rank)

    def bias(self) -> Tensor | None:
        """Everything added to the scaled logits as one ``[B, H or 1, Tq, Tk]`` tensor: the
        logit bias and the low-rank terms, dense; None if nothing is."""
        out = self.logit_bias
        for term in self.low_rank:
            out = term.dense() if out is None else out + term.dense()
        return out

    @staticmethod
    def merge(terms: list["AttentionTerms | None"]) -> "AttentionTerms | None":
        """Combine the terms of several schemes (relative terms listed, biases summed, head
        overrides listed; two schemes may not replace the same head)."""
        terms = [t for t in terms if t is not None]
        if not terms:
            return None
        bias = scale = None
        for t in terms:
            if t.logit_bias is not None:
                bias = t.logit_bias if bias is None else bias + t.logit_bias
            if t.logit_scale is not None:
                scale = t.logit_scale if scale is None else scale * t.logit_scale
        overrides = [o for t in terms for o in t.head_overrides]
        heads = [h for o in overrides for h in o.heads()]
        if len(set(heads)) != len(heads):
            raise ValueError(f"two schemes replace the same attention head ({sorted(heads)})")
        return AttentionTerms([r for t in terms for r in t.relative], bias, overrides, scale,
                              [lr for t in terms for lr in t.low_rank])

    def own_heads(self, n_heads: int) -> tuple[int, int]:
        """The heads ``[lo, hi)`` the layer computes itself: all but the replaced ones when
        these are the first or the last heads, else all; all when all are replaced, so that
        the layer's projections still take part in the loss (DDP without
        ``find_unused_parameters`` expects a gradient for every parameter)."""
        replaced = sorted(h for o in self.head_overrides for h in o.heads())
        if (not replaced or len(replaced) == n_heads
                or replaced != list(range(replaced[0], replaced[0] + len(replaced)))):
            return 0, n_heads
        if replaced[0] == 0:
            return len(replaced), n_heads
        return (0, replaced[0]) if replaced[-1] == n_heads - 1 else (0, n_heads)

    def of_heads(self, lo: int, hi: int) -> "AttentionTerms":
        """These terms for heads ``[lo, hi)`` only (per-head biases, scales and low-rank terms
        sliced), no head overrides."""
        def sliced(t: Tensor | None) -> Tensor | None:
            return t[:, lo:hi] if t is not None and t.shape[1] > 1 else t
        return AttentionTerms(self.relative, sliced(self.logit_bias), [],
                              sliced(self.logit_scale), [t.heads(lo, hi) for t in self.low_rank])

    def pair_term(self) -> tuple[RelativeTerm, "AttentionTerms"] | None:
        """The one relative term without factors (labels of the pair: Shaw's ``j − i``, tree
        relations) and the other terms, or None when there is no such term or several."""
        pairs = [r for r in self.relative if r.factors is None]
        if len(pairs) != 1:
            return None
        return pairs[0], replace(self, relative=[r for r in self.relative if r is not pairs[0]])

    def extended_widths(self, d_k: int) -> tuple[int, int] | None:
        """The head widths of queries/keys and of values on the extra-dimensions path
        (:meth:`MultiHeadAttention._attend_extended`), or None where these terms have no such
        form (a dense bias or scale, a relative term without factors, groups unknown)."""
        if (self.logit_bias is not None or self.logit_scale is not None
                or any(r.factors is None for r in self.relative)
                or any(t.groups is None for t in self.low_rank)):
            return None
        qk = v = d_k
        for rel in self.relative:
            width = rel.factors.table.shape[1]
            qk += width if rel.key_table is not None else 0
            v += width if rel.value_table is not None else 0
        qk += sum(t.groups * t.query.shape[-1] for t in self.low_rank)
        return qk, v


def _expand_labels(labels: Tensor, batch: int, heads: int) -> Tensor:
    """``[B, Tq, Tk]`` or ``[Tq, Tk]`` -> an expanded (no-copy) ``[B, H, Tq, Tk]`` index view."""
    if labels.dim() == 2:
        labels = labels.unsqueeze(0)
    tq, tk = labels.shape[-2:]
    return labels.unsqueeze(1).expand(batch, heads, tq, tk)


def stackable(linears: tuple[nn.Module, ...]) -> bool:
    """Whether the layers are plain ``nn.Linear`` ones, whose weights :func:`stacked_linears`
    can stack (not, e.g., the int8 layers of :mod:`~depnmt.model.quantize`)."""
    return all(isinstance(lin, nn.Linear) for lin in linears)


def stacked_linears(linears: tuple[nn.Linear, ...],
                    dtype: torch.dtype | None) -> tuple[Tensor, Tensor]:
    """The weights ``[Σ out, in]`` and biases ``[Σ out]`` of linear layers that read the same
    input, stacked, in ``dtype`` (None: as they are): one matrix multiply does all of them."""
    weight = torch.cat([lin.weight for lin in linears])
    bias = torch.cat([lin.bias for lin in linears])
    return (weight, bias) if dtype is None else (weight.to(dtype), bias.to(dtype))


def _key_term(q: Tensor, rel: RelativeTerm) -> Tensor:
    """``q_i · a^K_{l(i,j)}`` ``[B, H, Tq, Tk]`` of queries ``q [B, H, Tq, d_k]``: the products
    with every table row, gathered by label; for one query whose labels are every sentence's
    (``[1, Tk]``: Shaw's relative positions at a decoding step), one product with the rows of
    its labels ``[Tk, d_k]`` instead (one operation fewer, nothing expanded)."""
    if q.shape[2] == 1 and rel.labels.dim() == 2:
        return q @ rel.key_table.index_select(0, rel.labels[0]).t()
    b, h = q.shape[:2]
    return (q @ rel.key_table.t()).gather(-1, _expand_labels(rel.labels, b, h))


def _value_term(weights: Tensor, rel: RelativeTerm) -> Tensor:
    """``Σ_j α_ij a^V_{l(i,j)}`` ``[B, H, Tq, d_k]`` of attention weights ``[B, H, Tq, Tk]``: the
    weights summed per label (scatter), times the table; for one query with every sentence's
    labels (:func:`_key_term`), the weights times the rows of its labels ``[Tk, d_k]``."""
    if weights.shape[2] == 1 and rel.labels.dim() == 2:
        return weights @ rel.value_table.index_select(0, rel.labels[0])
    b, h, tq, _ = weights.shape
    bins = weights.new_zeros(b, h, tq, rel.value_table.shape[0])
    return bins.scatter_add_(-1, _expand_labels(rel.labels, b, h), weights) @ rel.value_table


def _plus_value_terms(out: Tensor, d: int, values: list) -> Tensor:
    """The first ``d`` columns of an output on the extra dimensions ``[B, H, Tq, ≥ d]`` plus
    the value term of each key-class mass in its other columns, ``Σ_w m_i[w] a^V_{L[c(i), w]}``
    (``values``: :meth:`MultiHeadAttention._extended`'s)."""
    z = out[..., :d]
    for offset, rows, table in values:
        mass = out[..., offset:offset + rows.shape[-1]]
        z = z + _value_term(mass, RelativeTerm(rows, None, table)).to(z.dtype)
    return z


def _takes_kernel(q: Tensor, k: Tensor, mask: Tensor | None, terms: AttentionTerms,
                  causal: bool, dropout_p: float, d_k: int) -> bool:
    """Whether ``terms`` take the label-bins kernel (:mod:`depnmt.model.kernels`; the module
    docstring): one relative term without factors, the others with the extra-dimensions form,
    no dropout, a padding or causal mask, heads at most :data:`MAX_KERNEL_HEAD_DIM` wide, at
    most :data:`MAX_KERNEL_LABELS` labels; :func:`path` ``fused`` where the kernel runs,
    ``auto`` there but on the CPU (where it runs only interpreted). ``q [B, H, Tq, d_k]``,
    ``k [B, H, Tk, d_k]``, the rest as :meth:`MultiHeadAttention.forward`'s."""
    mode = path()
    if mode == "explicit" or dropout_p or (mode == "auto" and q.device.type == "cpu"):
        return False
    split = terms.pair_term()
    if split is None:
        return False
    pair, rest = split
    widths = rest.extended_widths(d_k)
    return (widths is not None and pair.rows() <= MAX_KERNEL_LABELS
            and max(widths) <= MAX_KERNEL_HEAD_DIM and q.dtype in KERNEL_DTYPES
            and _kernel_mask(mask, causal, q.shape[0], q.shape[2], k.shape[2]) is not False
            and kernels.runs_on(q.device))


def _kernel_mask(mask: Tensor | None, causal: bool, batch: int, tq: int,
                 tk: int) -> Tensor | None | bool:
    """The label-bins kernel's key mask ``[B, Tk]`` of an attention ``mask`` (None: none, or
    the causal one), or False where the kernel takes no such mask (only padded keys
    ``[B or 1, 1, 1, Tk]`` and the causal mask of a self-attention, ``Tq = Tk``, are
    taken)."""
    if causal:
        return None if tq == tk else False
    if mask is None:
        return None
    if mask.dim() != 4 or mask.shape[1:3] != (1, 1) or mask.dtype != torch.bool:
        return False
    return mask[:, 0, 0, :].expand(batch, tk)


def _kernel_labels(rel: RelativeTerm) -> dict:
    """``rel``'s labels for the kernel: its positions where it has them, else its labels, int8
    where they fit (a quarter of a [B, T, T] int32 read) or int32."""
    if rel.positions is not None:
        return {"positions": (rel.positions.query, rel.positions.key, rel.positions.clip)}
    return {"labels": rel.labels.to(torch.int8 if rel.rows() <= 128 else torch.int32)}


def _multiple_of_8(width: int) -> int:
    return -(-width // 8) * 8


def _padded_cat(parts: list[Tensor], width: int) -> Tensor:
    """``parts [..., w_n]`` side by side, zero-padded to ``width`` on the last dim."""
    used = sum(t.shape[-1] for t in parts)
    if used < width:
        parts = parts + [parts[0].new_zeros(*parts[0].shape[:-1], width - used)]
    return torch.cat(parts, dim=-1)


class MultiHeadAttention(nn.Module):
    """Multi-head scaled dot-product attention.

    Shapes: query ``[B, Tq, D]``, key/value input ``[B, Tk, D]``, ``mask`` bool broadcastable to
    ``[B, 1, Tq, Tk]`` with True = may attend. Output ``[B, Tq, D]``.
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model {d_model} is not divisible by n_heads {n_heads}")
        self.n_heads, self.d_k = n_heads, d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.dropout = dropout

    def split_heads(self, x: Tensor) -> Tensor:
        """``[B, T, D]`` -> ``[B, H, T, d_k]`` (a view)."""
        b, t, _ = x.shape
        return x.view(b, t, self.n_heads, self.d_k).transpose(1, 2)  # (B, H, T, d_k)

    def project_kv(self, kv: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and values ``[B, H, Tk, d_k]`` (cached by the decoder for incremental decoding)."""
        return self.split_heads(self.k_proj(kv)), self.split_heads(self.v_proj(kv))

    def project_self(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Queries, keys and values ``[B, H, T, d_k]`` of a self-attention over ``x [B, T, D]``
        by one matrix multiply with ``W^Q``, ``W^K``, ``W^V`` stacked ``[3D, D]`` (each output
        is the dot product of the projection's own; the stacking is part of the graph, so each
        weight gets its gradient), reading ``x`` once instead of three times."""
        linears = (self.q_proj, self.k_proj, self.v_proj)
        if not stackable(linears):                      # e.g. int8 layers (quantize.py)
            return tuple(self.split_heads(lin(x)) for lin in linears)
        weight, bias = stacked_linears(linears, None)
        q, k, v = F.linear(x, weight, bias).chunk(3, dim=-1)
        return self.split_heads(q), self.split_heads(k), self.split_heads(v)

    def fused_qkv(self, dtype: torch.dtype | None = None) -> PackedWeights:
        """``W^Q``, ``W^K``, ``W^V`` stacked ``[3D, D]`` with their biases ``[3D]``, in ``dtype``
        (e.g. autocast's, so that no step casts them again) and packed for the CPU's kernels
        (:mod:`~depnmt.model.packed`): for :meth:`project_qkv`."""
        return PackedWeights(*stacked_linears((self.q_proj, self.k_proj, self.v_proj), dtype))

    def project_qkv(self, x: Tensor, fused: PackedWeights) -> tuple[Tensor, ...]:
        """Queries, keys and values ``[B, H, T, d_k]`` of a self-attention over ``x [B, T, D]``
        by one matrix multiply with the :meth:`fused_qkv` weights (the values of the three
        projections: each output is the same dot product)."""
        return tuple(self.split_heads(t) for t in fused(x).chunk(3, dim=-1))

    def forward(self, query: Tensor, kv: Tensor | None = None, mask: Tensor | None = None,
                terms: AttentionTerms | None = None,
                cached_kv: tuple[Tensor, Tensor] | None = None,
                head_cache: dict[int, KeyValues] | None = None,
                scores: dict[str, Tensor] | None = None, causal: bool = False,
                q: Tensor | None = None) -> Tensor:
        """Attend from ``query`` to ``kv`` (or to precomputed ``cached_kv``; ``q``: the queries
        ``[B, H, Tq, d_k]`` when already projected, :meth:`project_qkv`).

        During incremental decoding ``head_cache`` holds the head overrides' keys/values by head
        index (read and updated here, see :class:`HeadOverride`); ``scores``, when given,
        receives the overrides' scores by name. ``causal``: ``mask`` is the causal mask
        ``[Tq, Tq]`` of a self-attention over the same positions (query i sees keys ≤ i and
        nothing else is masked), which the fused path without terms leaves to SDPA
        (``is_causal``: its flash kernels take no explicit mask); the other paths use ``mask``.
        Cached keys/values in another dtype than the queries' (fp32 caches of a search on the
        CPU under bf16 autocast, :class:`~depnmt.model.transformer.DecoderState`) are attended
        in theirs, outside autocast.
        """
        if q is None and cached_kv is None and kv is query:
            q, k, v = self.project_self(query)                      # (B, H, T, d_k) each
        else:
            if q is None:
                q = self.split_heads(self.q_proj(query))            # (B, H, Tq, d_k)
            k, v = cached_kv if cached_kv is not None else self.project_kv(kv)
        # the replaced heads are not computed, except over a cache: its keys/values are
        # contiguous over all heads, and slicing some would copy them at every step
        lo, hi = (0, self.n_heads) if terms is None or cached_kv is not None \
            else terms.own_heads(self.n_heads)
        if (lo, hi) != (0, self.n_heads):
            q, k, v = q[:, lo:hi], k[:, lo:hi], v[:, lo:hi]
        out = self._attend_any(q, k, v, mask, terms if (lo, hi) == (0, self.n_heads)
                               else terms.of_heads(lo, hi), causal)   # (B, hi - lo, Tq, d_k)
        if terms is not None and terms.head_overrides:
            own = {o.head: self._override(o, query, kv, mask, head_cache, scores)
                   for o in terms.head_overrides}
            out = self._with_heads(out, lo, hi, own)
        b, _, tq, _ = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(b, tq, self.n_heads * self.d_k))

    def _attend_any(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None,
                    terms: AttentionTerms | None, causal: bool) -> Tensor:
        """:meth:`_attend`, or for keys/values cached in another dtype than the queries' (a
        search's fp32 caches under bf16 autocast, on the CPU) the explicit path in theirs
        (1.6x faster than SDPA's for a query or a few there), outside autocast."""
        if q.dtype == k.dtype:
            return self._attend(q, k, v, mask, terms, causal)
        with torch.autocast(q.device.type, enabled=False):
            return self._attend_with_terms(q.to(k.dtype), k, v, mask, terms or AttentionTerms([]))

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None,
                terms: AttentionTerms | None, causal: bool) -> Tensor:
        """Eq. 2 with the scheme's ``terms`` (head overrides aside): ``q [B, H, Tq, d_k]``,
        ``k``, ``v [B, H, Tk, d_k]`` -> ``[B, H, Tq, d_k]``, by the fastest path that computes
        them (``mask``, ``causal``: :meth:`forward`)."""
        dropout_p = self.dropout if self.training else 0.0
        if terms is not None and _takes_kernel(q, k, mask, terms, causal, dropout_p, self.d_k):
            return self._attend_kernel(q, k, v, mask, terms, causal)
        if terms is not None and self._extends(q, terms):
            return self._attend_extended(q, k, v, mask, terms, dropout_p)
        # On the CPU, SDPA with dropout falls back to its unfused path with a per-element mask
        # (bernoulli_), and its bf16 kernel is slower than the explicit path with an fp32
        # softmax: there the explicit path with depnmt's cheaper mask is 1.14x / 1.17x faster
        # (docs/performance.md, "bf16 on the CPU"); fp32 without dropout (and CUDA) stays fused
        fused = q.device.type != "cpu" or (dropout_p == 0.0 and q.dtype == torch.float32)
        if fused and (terms is None or (not terms.relative and not terms.has_bias()
                                        and terms.logit_scale is None)):
            # Fast path: Eq. 2, softmax(q k^T / sqrt(d_k)) v, fused.
            return F.scaled_dot_product_attention(q, k, v, attn_mask=None if causal else mask,
                                                  dropout_p=dropout_p, is_causal=causal)
        if fused and terms.logit_scale is None and all(r.value_table is None
                                                       for r in terms.relative):
            # Only additive logit terms (key terms, biases): softmax(q k^T / sqrt(d_k) + A) v,
            # fused, A = the key terms / sqrt(d_k) + bias, -inf where masked.
            return F.scaled_dot_product_attention(q, k, v, self._additive_mask(q, mask, terms),
                                                  dropout_p=dropout_p)
        return self._attend_with_terms(q, k, v, mask, terms or AttentionTerms([]))

    def _extends(self, q: Tensor, terms: AttentionTerms) -> bool:
        """Whether ``terms`` take the extra-dimensions path (the module docstring): they all
        have factors, and :func:`path` is ``fused``, or ``auto`` off the CPU with heads at most
        :data:`MAX_FUSED_HEAD_DIM` wide."""
        mode = path()
        if mode == "explicit" or (mode == "auto" and q.device.type == "cpu"):
            return False
        widths = terms.extended_widths(self.d_k)
        if widths is None or not (terms.relative or terms.low_rank):
            return False
        return mode == "fused" or _multiple_of_8(max(widths)) <= MAX_FUSED_HEAD_DIM

    def _attend_kernel(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None,
                       terms: AttentionTerms, causal: bool) -> Tensor:
        """Eq. 2 with a relative term of pair labels in the label-bins kernel, the other terms
        as extra dimensions of its heads (dep's depths beside Shaw's ``j − i`` in dep+rel):
        ``q [B, H, Tq, d_k]``, ``k``, ``v [B, H, Tk, d_k]`` -> ``[B, H, Tq, d_k]``; ``mask``,
        ``causal`` as :meth:`forward`'s. Exact: the key term ``q_i · a^K_r`` of every label
        ``[B, H, Tq, R]`` goes in, the label bins ``β [B, H, Tq, R]`` come out and ``β a^V`` is
        the value term (:mod:`depnmt.model.kernels.label_bins`)."""
        pair, rest = terms.pair_term()
        d = q.shape[-1]
        q = self._scaled(q)
        key_scores = None if pair.key_table is None else q @ pair.key_table.t().to(q.dtype)
        if rest.relative or rest.low_rank:
            q, k, v, values = self._extended(q, k, v, rest)
        else:
            values = []
        out, bins = kernels.label_bin_attention(
            q, k, v, key_scores, pair.rows(), pair.value_table is not None,
            key_mask=_kernel_mask(mask, causal, q.shape[0], q.shape[2], k.shape[2]),
            causal=causal, **_kernel_labels(pair))
        z = _plus_value_terms(out, d, values)
        if bins is not None:                                       # Σ_r β_ir a^V_r
            z = z + (bins @ pair.value_table).to(z.dtype)
        return z

    def _extended(self, q: Tensor, k: Tensor, v: Tensor,
                  terms: AttentionTerms) -> tuple[Tensor, Tensor, Tensor, list]:
        """Scaled queries ``q``, keys ``k`` and values ``v`` ``[B, H, T, d_k]`` with the extra
        dimensions of ``terms`` (the module docstring), zero-padded to a multiple of 8, and
        the value terms to add to the output, ``(offset, labels [B, Tq, W], a^V)`` each
        (:func:`_plus_value_terms`)."""
        b, h = q.shape[:2]
        qs, ks, vs, values = [q], [k], [v], []
        for rel in terms.relative:
            rows = rel.factors.query_labels()                              # (B, Tq, W)
            onehot = rel.factors.key_onehot(k.dtype).unsqueeze(1)          # (B, 1, Tk, W)
            onehot = onehot.expand(b, h, *onehot.shape[2:])
            if rel.key_table is not None:                  # q_i · a^K_{L[c(i), w]} / √d_k
                qs.append(_key_term(q, RelativeTerm(rows, rel.key_table, None)).to(q.dtype))
                ks.append(onehot)
            if rel.value_table is not None:                # the mass of each key class
                values.append((sum(t.shape[-1] for t in vs), rows, rel.value_table))
                vs.append(onehot)
        for term in terms.low_rank:
            extra_q, extra_k = term.extended()
            qs.append(extra_q.to(q.dtype))
            ks.append(extra_k.to(k.dtype))
        width = _multiple_of_8(max(sum(t.shape[-1] for t in parts) for parts in (qs, vs)))
        return (*(_padded_cat(parts, width) for parts in (qs, ks, vs)), values)

    def _attend_extended(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None,
                         terms: AttentionTerms, dropout_p: float) -> Tensor:
        """Eq. 2 with factored relative terms and low-rank logits as extra dimensions of the
        heads, in one fused SDPA call (the module docstring): ``q [B, H, Tq, d_k]``, ``k``, ``v
        [B, H, Tk, d_k]`` -> ``[B, H, Tq, d_k]``; ``mask`` as :meth:`forward`'s (the causal one
        included). Exact: the logits are the explicit path's, and dropout drops the weights of
        the value terms' masses with those of the values."""
        q_, k_, v_, values = self._extended(self._scaled(q), k, v, terms)
        out = F.scaled_dot_product_attention(q_, k_, v_, attn_mask=mask, dropout_p=dropout_p,
                                             scale=1.0)
        return _plus_value_terms(out, q.shape[-1], values)

    @staticmethod
    def _override(override: HeadOverride, query: Tensor, kv: Tensor, mask: Tensor | None,
                  head_cache: dict[int, KeyValues] | None,
                  scores: dict[str, Tensor] | None) -> Tensor:
        """The scheme's heads ``[B, count, Tq, d_k]`` (its cache and scores recorded)."""
        result = override.compute(query, kv, mask, None if head_cache is None
                                  else head_cache.get(override.head))
        if head_cache is not None:
            head_cache[override.head] = result.kv
        if scores is not None and result.scores is not None:
            scores[override.name] = result.scores
        return override.own(result)

    def _with_heads(self, out: Tensor, lo: int, hi: int, own: dict[int, Tensor]) -> Tensor:
        """Deguchi et al. Eq. 17, ``[M_1; …; M_parse; …]``: the layer's heads ``[lo, hi)``
        (``out [B, hi − lo, Tq, d_k]``) and the schemes' ``own`` heads by first index, in head
        order, in ``out``'s dtype; with every head computed (``lo, hi = 0, H``) the schemes'
        heads replace the layer's."""
        if (lo, hi) == (0, self.n_heads):
            for h, heads in own.items():
                out = torch.cat([out[:, :h], heads.to(out.dtype), out[:, h + heads.shape[1]:]], 1)
            return out
        pieces = {lo: out, **{h: heads.to(out.dtype) for h, heads in own.items()}}
        return torch.cat([pieces[h] for h in sorted(pieces)], 1)

    def _scaled(self, q: Tensor) -> Tensor:
        """``q / √d_k`` (any shape): the queries of the scaled logits of Eq. 2."""
        return q * self.d_k ** -0.5

    def _additive_mask(self, q: Tensor, mask: Tensor | None, terms: AttentionTerms) -> Tensor:
        """``[B, H, Tq, Tk]`` float: ``Σ q_i · a^K_{l(i,j)} / √d_k + bias``, ``-inf`` where
        ``mask`` is False (the key terms of Eqs. 11–12 / 17–18, gathered as in the explicit
        path; the low-rank terms dense)."""
        b, h, tq, _ = q.shape
        q = self._scaled(q)                          # q_i · a^K / √d_k: never unscaled in fp16
        add = None
        for rel in terms.relative:
            if rel.key_table is not None:
                idx = _expand_labels(rel.labels, b, h)
                term = (q @ rel.key_table.t().to(q.dtype)).gather(-1, idx)
                add = term if add is None else add + term
        bias = terms.bias()
        if bias is not None:
            add = bias if add is None else add + bias
        tk = add.shape[-1] if add is not None else mask.shape[-1]
        add = (add if add is not None else q.new_zeros(())).expand(b, h, tq, tk).to(q.dtype)
        if mask is not None:
            add = add.masked_fill(~mask, float("-inf"))
        return add

    def _attend_with_terms(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None,
                           terms: AttentionTerms) -> Tensor:
        """Eqs. 11–15 (Shaw) / 17–22 (Omote) in gather/scatter form; see the module docstring.

        ``e_ij = (q_i / √d_k)·k_j + (q_i / √d_k)·a^K_ij``, the scaled form of Eq. 12: under
        autocast the products run in half precision, where the unscaled sum may overflow
        (65504 in fp16). fp16 logits are summed with the terms, scale and bias in fp32; bf16
        ones (fp32's range; the CPU's fast path) stay bf16."""
        b, h, tq, _ = q.shape
        q = self._scaled(q)
        scores = q @ k.transpose(-1, -2)                            # (B, H, Tq, Tk)
        if scores.dtype == torch.float16:
            scores = scores.float()
        for rel in terms.relative:
            if rel.key_table is not None:                           # e_ij += q_i a^K_ij / √d_k
                scores = scores + _key_term(q, rel)
        if terms.logit_scale is not None:                          # PASCAL: S ⊙ N
            scores = scores * terms.logit_scale
        bias = terms.bias()
        if bias is not None:
            scores = scores + bias
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1, dtype=torch.float32)   # fp32 under autocast too
        weights = dropout(weights, self.dropout, self.training)
        out = weights @ v                                           # (B, H, Tq, d_k)
        for rel in terms.relative:
            if rel.value_table is not None:                         # z_i += Σ_j α_ij a^V_ij
                out = out + _value_term(weights, rel)
        return out


def reference_attention(attn: MultiHeadAttention, query: Tensor, kv: Tensor,
                        mask: Tensor | None, terms: AttentionTerms | None = None) -> Tensor:
    """The equations the fast paths of :class:`MultiHeadAttention` implement, written literally
    with ``[B, Tq, Tk, d_k]`` tensors of the per-pair vectors (for tests; no dropout):

        e_ij = (x_i W^Q)(x_j W^K + a^K_ij)^T / √d_k       Omote et al. Eqs. 12, 18 (Shaw's a^K)
        e_ij ← e_ij · scale_ij + bias_ij                   PASCAL's S ⊙ N; GPS Eq. 5 (a bias)
        α_ij = softmax_j(e_ij)  over the keys ``mask`` allows
        z_i  = Σ_j α_ij (x_j W^V + a^V_ij)                 Omote et al. Eqs. 11, 17
        out  = [z^1; …; M_override; …; z^H] W^O            multi-head concat; Deguchi Eq. 17

    Every relative term adds its own a^K / a^V (Eqs. 21–22 sum them). Shapes as in
    :meth:`MultiHeadAttention.forward`: query ``[B, Tq, D]``, kv ``[B, Tk, D]``, ``mask``
    broadcastable to ``[B, 1, Tq, Tk]``; returns ``[B, Tq, D]``.
    """
    b, tq, _ = query.shape
    tk, h, dk = kv.shape[1], attn.n_heads, attn.d_k
    terms = terms or AttentionTerms([])
    q = attn.q_proj(query).view(b, tq, h, dk)
    k = attn.k_proj(kv).view(b, tk, h, dk)
    v = attn.v_proj(kv).view(b, tk, h, dk)
    pairs = [(rel, rel.labels.expand(b, tq, tk)) for rel in terms.relative]   # l(i, j)
    e = torch.einsum("bihd,bjhd->bhij", q, k)
    for rel, labels in pairs:
        if rel.key_table is not None:
            e = e + torch.einsum("bihd,bijd->bhij", q, rel.key_table[labels])
    e = e / math.sqrt(dk)
    if terms.logit_scale is not None:
        e = e * terms.logit_scale
    bias = terms.bias()
    if bias is not None:
        e = e + bias
    if mask is not None:
        e = e.masked_fill(~mask, float("-inf"))
    alpha = e.softmax(-1)
    z = torch.einsum("bhij,bjhd->bihd", alpha, v)
    for rel, labels in pairs:
        if rel.value_table is not None:
            z = z + torch.einsum("bhij,bijd->bihd", alpha, rel.value_table[labels])
    for override in terms.head_overrides:
        own = override.own(override.compute(query, kv, mask, None))       # [B, n, Tq, d_k]
        z[:, :, override.head:override.head + override.count] = own.transpose(1, 2)
    return attn.out_proj(z.reshape(b, tq, h * dk))

"""Attention with a relative term of pair labels in one fused Triton kernel, forward and
backward (FlashAttention-2's tiling, Dao 2023: no ``[T, T]`` matrix is written to memory).

The equations are Shaw et al. (2018) as Omote et al. (2019) write them, Eqs. 11–15 (17–22 for
tree labels): with ``l(i, j)`` the pair's label, ``a^K``, ``a^V`` the tables ``[R, d_k]`` and
queries already scaled by ``1/√d_k``,

    e_ij = q_i · k_j + q_i · a^K_{l(i,j)}                 (Eq. 12)
    α_ij = softmax_j(e_ij)  over the keys the mask allows
    z_i  = Σ_j α_ij v_j + Σ_j α_ij a^V_{l(i,j)}           (Eq. 11)

The kernel never forms a ``[T, T, d_k]`` tensor, nor ``[T, T]`` scores:

* key term: ``S_i = q_i · (a^K)ᵀ`` is a per-query ``[R]`` row (``key_scores [B, H, Tq, R]``, a
  small matrix multiply done outside), from which each tile gathers ``S_{i, l(i,j)}``;
* value term: per-query label bins ``β_{i,r} = Σ_{j: l(i,j) = r} α_ij`` accumulated in each
  tile with the same running-max rescaling as the output, so that ``z_i = O_i + β_i a^V``
  (the product with the table done outside);
* backward: ``dP_ij = dO_i · v_j + dβ_{i, l(i,j)}`` (``dβ = dz (a^V)ᵀ``),
  ``D_i = dO_i · O_i + dβ_i · β_i``, ``dS_ij = P_ij (dP_ij − D_i)``; ``dq = dS k``,
  ``dk = dSᵀ q``, ``dv = Pᵀ dO`` and the key scores' gradient ``dS`` summed into the same
  label bins.

Labels are computed in the kernel from positions (``clip(p_j − p_i, −k, k) + k + 1``, Shaw's
Eq. 15, label 0 free for "no term"), or read from an integer tensor ``[B, Tq, Tk]`` (or
``[Tq, Tk]`` shared by the batch; int8 when the labels fit). A tile whose labels are all equal
(Shaw's tiles farther than ``k`` from the diagonal: all clipped to ``±k``) adds its key term as
one column and its bins as one row sum. Label 0 adds nothing (its table rows are zero: the
module docstring of :mod:`depnmt.model.attention`), and its bins stay empty.

Masks: padded keys (``key_mask [B, Tk]``, True = may attend) and the causal mask of a
self-attention (query i sees keys ≤ i). A query that may attend to no key gets 0. No dropout.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor
from triton.runtime.interpreter import InterpretedFunction


@triton.jit
def _dot(a, b, UPCAST: tl.constexpr, IEEE: tl.constexpr):
    """``a @ b`` with fp32 accumulation: fp32 inputs in full precision (``IEEE``, not TF32, as
    torch's own fp32 matrix multiplies by default); ``UPCAST``: in fp32 (the interpreter, whose
    dot products misread bf16)."""
    if UPCAST:
        out = tl.dot(a.to(tl.float32), b.to(tl.float32))
    elif IEEE:
        out = tl.dot(a, b, input_precision="ieee")
    else:
        out = tl.dot(a, b)
    return out


@triton.jit
def _tile_labels(LAB, QP, KP, offs_m, offs_n, M, N, slm, sln, clip, POSITIONS: tl.constexpr):
    """``[BLOCK_M, BLOCK_N]`` int32 labels of a tile and whether they are all one label
    (``uniform``, ``const``), ``LAB`` at the batch row. Rows and columns past the ends count as
    label 0 / position 0, which only makes a tile less often uniform."""
    if POSITIONS:
        qp = tl.load(QP + offs_m, mask=offs_m < M, other=0)
        kp = tl.load(KP + offs_n, mask=offs_n < N, other=0)
        dist = kp[None, :] - qp[:, None]
        lab = tl.minimum(tl.maximum(dist, -clip), clip) + clip + 1
        below = tl.max(kp, 0) - tl.min(qp, 0) < -clip       # every j − i < −k: label 1
        above = tl.min(kp, 0) - tl.max(qp, 0) > clip        # every j − i > k: label 2k + 1
        uniform = below | above
        const = tl.where(below, 1, 2 * clip + 1)
    else:
        inside = (offs_m < M)[:, None] & (offs_n < N)[None, :]
        lab = tl.load(LAB + offs_m[:, None] * slm + offs_n[None, :] * sln,
                      mask=inside, other=0).to(tl.int32)
        const = tl.min(tl.min(lab, 1), 0)
        uniform = const == tl.max(tl.max(lab, 1), 0)
    return lab, uniform, const


@triton.jit
def _gathered(ROW, offs_m, M, lab, uniform, const):
    """``X[i, l(i, j)]`` ``[BLOCK_M, BLOCK_N]`` fp32 of a per-query table ``X [Tq, R]`` whose
    rows start at ``ROW + offs_m · stride`` (``ROW``: ``[BLOCK_M]`` pointers)."""
    if uniform:
        out = tl.load(ROW + const, mask=offs_m < M, other=0.0).to(tl.float32)[:, None]
        out = out + tl.zeros(lab.shape, tl.float32)
    else:
        out = tl.load(ROW[:, None] + lab, mask=(offs_m < M)[:, None], other=0.0).to(tl.float32)
    return out


@triton.jit
def _binned(x, lab, uniform, const, R: tl.constexpr, R_PAD: tl.constexpr):
    """``Σ_j x_ij [l(i, j) = r]`` ``[BLOCK_M, R_PAD]`` fp32 for labels ``r`` 1 … R − 1."""
    rr = tl.arange(0, R_PAD)
    if uniform:
        hit = ((rr == const) & (const > 0)).to(tl.float32)
        out = tl.sum(x, 1)[:, None] * hit[None, :]
    else:
        out = tl.zeros([x.shape[0], R_PAD], tl.float32)
        for r in tl.static_range(1, R):
            col = tl.sum(tl.where(lab == r, x, 0.0), 1)
            out += col[:, None] * (rr == r).to(tl.float32)[None, :]
    return out


@triton.jit
def _allowed(KM, offs_m, offs_n, M, N, KEY_MASK: tl.constexpr, CAUSAL: tl.constexpr):
    """``[BLOCK_M, BLOCK_N]`` bool: key j exists, is not padding (``KM`` at the batch row), and
    (causal) j ≤ i."""
    ok = (offs_n < N)[None, :] & (offs_m < M)[:, None]
    if KEY_MASK:
        keep = tl.load(KM + offs_n, mask=offs_n < N, other=0)
        ok = ok & (keep != 0)[None, :]
    if CAUSAL:
        ok = ok & (offs_n[None, :] <= offs_m[:, None])
    return ok


@triton.jit
def _tile_at(X, offs, stride, cols, n, width):
    """Pointers ``[len(offs), len(cols)]`` to rows ``offs`` (``stride`` apart) and columns
    ``cols`` (contiguous) of a matrix at ``X``, and the mask of those inside ``n`` rows and
    ``width`` columns."""
    return (X + offs[:, None] * stride + cols[None, :],
            (offs < n)[:, None] & (cols < width)[None, :])


@triton.jit
def _load_tile(X, offs, stride, cols, n, width):
    """The tile of :func:`_tile_at`, zeros outside the matrix."""
    ptrs, inside = _tile_at(X, offs, stride, cols, n, width)
    return tl.load(ptrs, mask=inside, other=0.0)


@triton.jit
def _store_tile(X, offs, stride, cols, n, width, x):
    """Writes ``x`` to the tile of :func:`_tile_at`, in ``X``'s dtype, inside the matrix."""
    ptrs, inside = _tile_at(X, offs, stride, cols, n, width)
    tl.store(ptrs, x.to(X.dtype.element_ty), mask=inside)


@triton.jit
def _key_end(pid_m, N, BLOCK_M: tl.constexpr, CAUSAL: tl.constexpr):
    """The end of the keys that query block ``pid_m`` sees: all ``N``, or (causal) those up to
    its last query (tiles past ``N`` are masked)."""
    end = N
    if CAUSAL:
        end = (pid_m + 1) * BLOCK_M
    return end


@triton.jit
def _query_start(pid_n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    """The first query that key block ``pid_n`` is seen by: 0, or (causal) the start of the
    query block of its first key."""
    start = 0
    if CAUSAL:
        start = (pid_n * BLOCK_N // BLOCK_M) * BLOCK_M
    return start


@triton.jit
def _tile_scores(q, k, qa_row, LAB, QP, KP, KM, offs_m, offs_n, M, N, slm, sln, clip,
                 POSITIONS: tl.constexpr, HAS_KEY: tl.constexpr, KEY_MASK: tl.constexpr,
                 CAUSAL: tl.constexpr, UPCAST: tl.constexpr, IEEE: tl.constexpr):
    """A tile's scores ``e_ij`` fp32 (−inf where the mask forbids) and its labels
    (:func:`_tile_labels`); ``LAB``, ``KM`` at the batch row."""
    lab, uniform, const = _tile_labels(LAB, QP, KP, offs_m, offs_n, M, N, slm, sln, clip,
                                       POSITIONS)
    s = _dot(q, tl.trans(k), UPCAST, IEEE)
    if HAS_KEY:
        s += _gathered(qa_row, offs_m, M, lab, uniform, const)
    s = tl.where(_allowed(KM, offs_m, offs_n, M, N, KEY_MASK, CAUSAL), s, float("-inf"))
    return s, lab, uniform, const


@triton.jit
def _forward(Q, K, V, QA, LAB, QP, KP, KM, O, BINS, LSE,
             sqb, sqh, sqm, skb, skh, skn, svb, svh, svn, sob, soh, som,
             sab, sah, sam, sbb, sbh, sbm, slb, slm, sln, skmb,
             H, M, N, D, DV, clip,
             R: tl.constexpr, R_PAD: tl.constexpr, POSITIONS: tl.constexpr,
             HAS_KEY: tl.constexpr, HAS_VALUE: tl.constexpr, KEY_MASK: tl.constexpr,
             CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
             BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr, UPCAST: tl.constexpr,
             IEEE: tl.constexpr):
    """One block of ``BLOCK_M`` queries of one (batch row, head): ``O``, ``β``, log-sum-exp."""
    pid_m, bh = tl.program_id(0), tl.program_id(1)
    b, h = bh // H, bh % H
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d, offs_dv = tl.arange(0, BLOCK_D), tl.arange(0, BLOCK_DV)
    q = _load_tile(Q + b * sqb + h * sqh, offs_m, sqm, offs_d, M, D)
    qa_row = QA + b * sab + h * sah + offs_m * sam
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], tl.float32)
    bins = tl.zeros([BLOCK_M, R_PAD], tl.float32)
    for start_n in range(0, _key_end(pid_m, N, BLOCK_M, CAUSAL), BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        k = _load_tile(K + b * skb + h * skh, offs_n, skn, offs_d, N, D)
        v = _load_tile(V + b * svb + h * svh, offs_n, svn, offs_dv, N, DV)
        s, lab, uniform, const = _tile_scores(q, k, qa_row, LAB + b * slb, QP, KP, KM + b * skmb,
                                              offs_m, offs_n, M, N, slm, sln, clip, POSITIONS,
                                              HAS_KEY, KEY_MASK, CAUSAL, UPCAST, IEEE)
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m_i - m_safe)
        p = tl.exp(s - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + _dot(p.to(v.dtype), v, UPCAST, IEEE)
        if HAS_VALUE:
            bins = bins * alpha[:, None] + _binned(p, lab, uniform, const, R, R_PAD)
        m_i = m_new
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    m_safe = tl.where(m_i == float("-inf"), 0.0, m_i)
    _store_tile(O + b * sob + h * soh, offs_m, som, offs_dv, M, DV, acc / l_safe[:, None])
    tl.store(LSE + bh * M + offs_m, m_safe + tl.log(l_safe), mask=offs_m < M)
    if HAS_VALUE:
        _store_tile(BINS + b * sbb + h * sbh, offs_m, sbm, tl.arange(0, R_PAD), M, R,
                    bins / l_safe[:, None])


@triton.jit
def _tile_grads(q, k, v, do, lse, delta, qa_row, dbins_row, LAB, QP, KP, KM, offs_m, offs_n,
                M, N, slm, sln, clip, POSITIONS: tl.constexpr, HAS_KEY: tl.constexpr,
                HAS_VALUE: tl.constexpr, KEY_MASK: tl.constexpr, CAUSAL: tl.constexpr,
                UPCAST: tl.constexpr, IEEE: tl.constexpr):
    """A tile's probabilities ``P``, score gradients ``dS`` (fp32) and labels, recomputed;
    ``LAB``, ``KM`` at the batch row."""
    s, lab, uniform, const = _tile_scores(q, k, qa_row, LAB, QP, KP, KM, offs_m, offs_n, M, N,
                                          slm, sln, clip, POSITIONS, HAS_KEY, KEY_MASK, CAUSAL,
                                          UPCAST, IEEE)
    p = tl.exp(s - lse[:, None])
    dp = _dot(do, tl.trans(v), UPCAST, IEEE)
    if HAS_VALUE:
        dp += _gathered(dbins_row, offs_m, M, lab, uniform, const)
    ds = p * (dp - delta[:, None])
    return p, ds, lab, uniform, const


@triton.jit
def _query_tile(Q, DO, LSE, DELTA, offs_m, sqm, som, offs_d, offs_dv, M, D, DV):
    """A block of queries' ``q``, ``dO``, log-sum-exp and ``D_i``, the pointers at the
    (batch row, head)."""
    q = _load_tile(Q, offs_m, sqm, offs_d, M, D)
    do = _load_tile(DO, offs_m, som, offs_dv, M, DV)
    lse = tl.load(LSE + offs_m, mask=offs_m < M, other=0.0)
    delta = tl.load(DELTA + offs_m, mask=offs_m < M, other=0.0)
    return q, do, lse, delta


@triton.jit
def _backward(Q, K, V, QA, LAB, QP, KP, KM, DO, DBINS, LSE, DELTA, DQ, DQA, DK, DV_,
              sqb, sqh, sqm, skb, skh, skn, svb, svh, svn, sob, soh, som,
              sab, sah, sam, sbb, sbh, sbm, slb, slm, sln, skmb,
              gqb, gqh, gqm, gkb, gkh, gkn, gvb, gvh, gvn,
              H, M, N, D, DV, clip, KEYS: tl.constexpr,
              R: tl.constexpr, R_PAD: tl.constexpr, POSITIONS: tl.constexpr,
              HAS_KEY: tl.constexpr, HAS_VALUE: tl.constexpr, KEY_MASK: tl.constexpr,
              CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr, UPCAST: tl.constexpr,
              IEEE: tl.constexpr):
    """One block of one (batch row, head) in the pass that ``KEYS`` selects (two launches, so
    that no two programs add into one gradient: no atomics). ``KEYS``: ``dk``, ``dv`` of one
    block of ``BLOCK_N`` keys, a loop over the query blocks; else ``dq`` and the key scores'
    gradient (label bins of ``dS``) of one block of ``BLOCK_M`` queries, a loop over the key
    blocks."""
    pid, bh = tl.program_id(0), tl.program_id(1)
    b, h = bh // H, bh % H
    offs_d, offs_dv = tl.arange(0, BLOCK_D), tl.arange(0, BLOCK_DV)
    Q, DO = Q + b * sqb + h * sqh, DO + b * sob + h * soh          # at the (batch row, head)
    K, V = K + b * skb + h * skh, V + b * svb + h * svh
    QA, DBINS = QA + b * sab + h * sah, DBINS + b * sbb + h * sbh
    LAB, KM, LSE, DELTA = LAB + b * slb, KM + b * skmb, LSE + bh * M, DELTA + bh * M
    if KEYS:
        offs_n = pid * BLOCK_N + tl.arange(0, BLOCK_N)
        k = _load_tile(K, offs_n, skn, offs_d, N, D)
        v = _load_tile(V, offs_n, svn, offs_dv, N, DV)
        dk, dv = tl.zeros([BLOCK_N, BLOCK_D], tl.float32), tl.zeros([BLOCK_N, BLOCK_DV], tl.float32)
        for start_m in range(_query_start(pid, BLOCK_M, BLOCK_N, CAUSAL), M, BLOCK_M):
            offs_m = start_m + tl.arange(0, BLOCK_M)
            q, do, lse, delta = _query_tile(Q, DO, LSE, DELTA, offs_m, sqm, som, offs_d, offs_dv,
                                            M, D, DV)
            p, ds, lab, uniform, const = _tile_grads(
                q, k, v, do, lse, delta, QA + offs_m * sam, DBINS + offs_m * sbm, LAB, QP, KP,
                KM, offs_m, offs_n, M, N, slm, sln, clip, POSITIONS, HAS_KEY, HAS_VALUE,
                KEY_MASK, CAUSAL, UPCAST, IEEE)
            dv += _dot(tl.trans(p.to(do.dtype)), do, UPCAST, IEEE)
            dk += _dot(tl.trans(ds.to(q.dtype)), q, UPCAST, IEEE)
        _store_tile(DK + b * gkb + h * gkh, offs_n, gkn, offs_d, N, D, dk)
        _store_tile(DV_ + b * gvb + h * gvh, offs_n, gvn, offs_dv, N, DV, dv)
    else:
        offs_m = pid * BLOCK_M + tl.arange(0, BLOCK_M)
        q, do, lse, delta = _query_tile(Q, DO, LSE, DELTA, offs_m, sqm, som, offs_d, offs_dv, M,
                                        D, DV)
        dq, dqa = tl.zeros([BLOCK_M, BLOCK_D], tl.float32), tl.zeros([BLOCK_M, R_PAD], tl.float32)
        qa_row, dbins_row = QA + offs_m * sam, DBINS + offs_m * sbm
        for start_n in range(0, _key_end(pid, N, BLOCK_M, CAUSAL), BLOCK_N):
            offs_n = start_n + tl.arange(0, BLOCK_N)
            k = _load_tile(K, offs_n, skn, offs_d, N, D)
            v = _load_tile(V, offs_n, svn, offs_dv, N, DV)
            p, ds, lab, uniform, const = _tile_grads(
                q, k, v, do, lse, delta, qa_row, dbins_row, LAB, QP, KP, KM, offs_m, offs_n, M,
                N, slm, sln, clip, POSITIONS, HAS_KEY, HAS_VALUE, KEY_MASK, CAUSAL, UPCAST,
                IEEE)
            dq += _dot(ds.to(k.dtype), k, UPCAST, IEEE)
            if HAS_KEY:
                dqa += _binned(ds, lab, uniform, const, R, R_PAD)
        _store_tile(DQ + b * gqb + h * gqh, offs_m, gqm, offs_d, M, D, dq)
        if HAS_KEY:
            _store_tile(DQA + b * sab + h * sah, offs_m, sam, tl.arange(0, R_PAD), M, R, dqa)


# -- launching ---------------------------------------------------------------------------------

def _pow2(n: int, least: int = 16) -> int:
    return max(least, 1 << (n - 1).bit_length())


def default_blocks(width: int) -> tuple[int, int]:
    """``(BLOCK_M, BLOCK_N)`` for heads ``width`` wide (padded to a power of 2): 64 × 64 up to
    64, 64 × 32 wider (FlashAttention-2's Triton tutorial's sizes for these widths)."""
    return (64, 64) if width <= 64 else (64, 32)


class _Launch:
    """The arguments every kernel takes besides its own tensors: strides, sizes, flags."""

    def __init__(self, q: Tensor, k: Tensor, v: Tensor, qa: Tensor | None, rows: int,
                 values: bool, positions, labels: Tensor | None, key_mask: Tensor | None,
                 causal: bool, blocks: tuple[int, int] | None):
        b, h, m, d = q.shape
        n, dv = k.shape[2], v.shape[3]
        self.shape = (b, h, m, n, d, dv)
        self.qa = qa if qa is not None else q.new_zeros(1, dtype=torch.float32)
        if positions is not None:
            qp, kp, clip = positions
            self.qp, self.kp, self.clip = qp.to(torch.int32), kp.to(torch.int32), int(clip)
            self.lab, self.lab_strides = self.qp, (0, 0, 0)
        else:
            self.qp = self.kp = q.new_zeros(1, dtype=torch.int32)
            self.clip = 0
            self.lab = labels if labels.dim() == 3 else labels.unsqueeze(0)
            self.lab_strides = (self.lab.stride(0) if self.lab.shape[0] > 1 else 0,
                                self.lab.stride(1), self.lab.stride(2))
        self.km = (key_mask.view(torch.uint8) if key_mask is not None
                   else q.new_zeros(1, dtype=torch.uint8))
        block_m, block_n = blocks or default_blocks(_pow2(max(d, dv)))
        self.grid_m, self.grid_n = triton.cdiv(m, block_m), triton.cdiv(n, block_n)
        self.flags = dict(R=rows, R_PAD=_pow2(rows, 2), POSITIONS=positions is not None,
                          HAS_KEY=qa is not None, HAS_VALUE=values,
                          KEY_MASK=key_mask is not None, CAUSAL=causal, BLOCK_M=block_m,
                          BLOCK_N=block_n, BLOCK_D=_pow2(d), BLOCK_DV=_pow2(dv),
                          UPCAST=isinstance(_forward, InterpretedFunction),
                          IEEE=q.dtype == torch.float32,
                          num_warps=4, num_stages=2)

    def strides(self, q: Tensor, k: Tensor, v: Tensor, o: Tensor, bins: Tensor) -> tuple:
        """Strides of (batch, head, time) of ``q``, ``k``, ``v``, ``o`` (also of ``dO``), the
        key scores (also of their gradient), ``bins`` (also of their gradient), labels and key
        mask; the last dimensions are contiguous."""
        qa = self.qa if self.qa.dim() == 4 else None
        return (*q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *o.stride()[:3],
                *(qa.stride()[:3] if qa is not None else (0, 0, 0)),
                *(bins.stride()[:3] if bins.dim() == 4 else (0, 0, 0)), *self.lab_strides,
                self.km.stride(0) if self.km.dim() == 2 else 0)

    def sizes(self) -> tuple:
        b, h, m, n, d, dv = self.shape
        return h, m, n, d, dv, self.clip


class LabelBinAttention(torch.autograd.Function):
    """``(out [B, H, Tq, d_v], bins [B, H, Tq, R] fp32)`` of :func:`attention`."""

    @staticmethod
    def forward(ctx, q, k, v, qa, launch: _Launch):
        b, h, m, n, d, dv = launch.shape
        out = q.new_empty(b, h, m, dv)
        has_value = launch.flags["HAS_VALUE"]
        bins = q.new_zeros(b, h, m, launch.flags["R"] if has_value else 0, dtype=torch.float32)
        lse = q.new_empty(b, h, m, dtype=torch.float32)
        if q.device.type != "meta":
            _forward[(launch.grid_m, b * h)](
                q, k, v, launch.qa, launch.lab, launch.qp, launch.kp, launch.km, out, bins, lse,
                *launch.strides(q, k, v, out, bins), *launch.sizes(), **launch.flags)
        ctx.save_for_backward(q, k, v, launch.qa, out, bins, lse)
        ctx.launch = launch
        if not has_value:
            ctx.mark_non_differentiable(bins)
        return out, bins

    @staticmethod
    def backward(ctx, d_out, d_bins):
        q, k, v, qa, out, bins, lse = ctx.saved_tensors
        launch = ctx.launch
        b, h, m, n, d, dv = launch.shape
        d_out = d_out.contiguous()
        delta = (d_out.float() * out.float()).sum(-1)                      # D_i
        if launch.flags["HAS_VALUE"] and d_bins is not None:
            d_bins = d_bins.contiguous()
            delta = delta + (d_bins * bins).sum(-1)
        else:
            d_bins = bins.new_zeros(b, h, m, launch.flags["R"])
        dq, dk, dv_ = (t.new_empty(t.shape) for t in (q, k, v))           # contiguous
        dqa = torch.zeros_like(qa, dtype=torch.float32) if launch.flags["HAS_KEY"] else qa
        if q.device.type != "meta":
            common = (*launch.strides(q, k, v, d_out, d_bins),
                      *(x for t in (dq, dk, dv_) for x in t.stride()[:3]), *launch.sizes())
            tensors = (q, k, v, launch.qa, launch.lab, launch.qp, launch.kp, launch.km, d_out,
                       d_bins, lse, delta.contiguous())
            for keys, grid in ((True, launch.grid_n), (False, launch.grid_m)):
                _backward[(grid, b * h)](*tensors, dq, dqa, dk, dv_, *common, KEYS=keys,
                                         **launch.flags)
        return dq, dk, dv_, (dqa.to(qa.dtype) if launch.flags["HAS_KEY"] else None), None


def attention(q: Tensor, k: Tensor, v: Tensor, key_scores: Tensor | None, rows: int,
              values: bool, *, positions: tuple[Tensor, Tensor, int] | None = None,
              labels: Tensor | None = None, key_mask: Tensor | None = None,
              causal: bool = False, blocks: tuple[int, int] | None = None
              ) -> tuple[Tensor, Tensor | None]:
    """Attention with one relative term (the module docstring), differentiable.

    ``q [B, H, Tq, D]`` (scaled by ``1/√d_k``), ``k [B, H, Tk, D]``, ``v [B, H, Tk, D_v]`` of
    one dtype; ``key_scores [B, H, Tq, R]`` the key term's ``q_i · a^K_r`` for every label (None:
    no key term); ``rows``: the number of labels R; ``values``: whether to return the label
    bins (the value term). Labels from ``positions = (p_q [Tq], p_k [Tk], k)`` or ``labels
    [B, Tq, Tk]`` / ``[Tq, Tk]`` (integers ``0 … R − 1``); ``key_mask [B, Tk]`` bool, True = may
    attend; ``causal``: query i sees keys ≤ i (``Tq = Tk``). ``blocks``: ``(BLOCK_M, BLOCK_N)``,
    powers of 2 ≥ 16 (tests). Returns ``O [B, H, Tq, D_v]`` in ``q``'s dtype and the bins
    ``β [B, H, Tq, R]`` fp32 (None without ``values``): ``z = O + β a^V``.
    """
    if (positions is None) == (labels is None):
        raise ValueError("give labels either as positions or as a label tensor")
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    if key_scores is not None:
        key_scores = key_scores.contiguous()
    if key_mask is not None and key_mask.stride(-1) != 1:
        key_mask = key_mask.contiguous()
    launch = _Launch(q, k, v, key_scores, rows, values, positions, labels, key_mask, causal,
                     blocks)
    out, bins = LabelBinAttention.apply(q, k, v, key_scores, launch)
    return out, bins if values else None

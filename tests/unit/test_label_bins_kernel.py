"""The label-bins attention kernel (:mod:`depnmt.model.kernels.label_bins`: Shaw's relative
terms, and any one relative term of pair labels, inside one fused Triton kernel, forward and
backward) under Triton's interpreter on the CPU (``TRITON_INTERPRET=1``): the kernel against the
literal equations, values and gradients, fp32 and bf16/fp16, padded keys, the causal mask, odd
lengths, several head widths, labels from positions or from a tensor, tiles of one label and of
many; ``MultiHeadAttention`` on the kernel path against :func:`reference_attention`; training
steps of rel, dep+rel and rel with key terms only against the explicit path. Skipped where
Triton is not installed (CPU builds of torch do not bring it)."""

from __future__ import annotations

import importlib
import os
import sys

import pytest
import torch

from depnmt.model import kernels

if not kernels.triton_installed(kernels.MIN_INTERPRETER):
    pytest.skip("the label-bins kernel runs on the CPU in the interpreter of Triton "
                f"{'.'.join(map(str, kernels.MIN_INTERPRETER))} or newer (installed: "
                f"{'.'.join(map(str, kernels.triton_version() or ())) or 'none'}; "
                "`pip install -e .[dev]` brings it)", allow_module_level=True)

if "triton" in sys.modules and not kernels.interpreted():
    pytest.skip("Triton was imported before its interpreter was asked for (its language's "
                "functions are made for one or the other at import): run these tests in a "
                "fresh process", allow_module_level=True)
if "triton" not in sys.modules:     # import it for the interpreter, and leave the rest as it is
    before = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    import triton.language  # noqa: E402, F401
    if before is None:
        del os.environ["TRITON_INTERPRET"]
    else:
        os.environ["TRITON_INTERPRET"] = before

from depnmt.model.attention import (AttentionTerms, ClippedDistance, LabelFactors,  # noqa: E402
                                    MultiHeadAttention, RelativeTerm, reference_attention)
from test_fused_attention import (counted, errors, model_and_batch, run,  # noqa: E402
                                  use_path)  # tests/unit is on sys.path (no __init__.py)

BLOCKS = (16, 16)           # the smallest tiles tl.dot takes: several tiles at tiny lengths
CLIP = 2


@pytest.fixture(autouse=True)
def interpreter(monkeypatch):
    """The kernels run in Triton's interpreter (the variable is read when they are defined:
    a module imported earlier without it, by a test of the path choice, is made again)."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    module = importlib.import_module("depnmt.model.kernels.label_bins")
    if type(module._forward).__name__ != "InterpretedFunction":     # compiled first (a GPU)
        importlib.reload(module)


def label_bins():
    return importlib.import_module("depnmt.model.kernels.label_bins")


# -- the kernel against the equations ----------------------------------------------------------

def literal(q, k, v, a_k, a_v, labels, key_mask, causal):
    """Shaw's Eqs. 11–12 (Omote et al.) written with ``[B, Tq, Tk, d]`` tensors of the pairs'
    table rows: ``q`` scaled, ``labels [B, Tq, Tk]``; label 0's rows count as zero."""
    zero = labels == 0
    e = q @ k.transpose(-1, -2)
    if a_k is not None:
        rows = a_k[labels].masked_fill(zero[..., None], 0.0)                 # (B, Tq, Tk, d)
        e = e + torch.einsum("bhid,bijd->bhij", q, rows)
    allowed = torch.ones_like(e, dtype=torch.bool)
    if key_mask is not None:
        allowed = allowed & key_mask[:, None, None, :]
    if causal:
        allowed = allowed & torch.ones(e.shape[-2:], dtype=torch.bool).tril()
    alpha = e.masked_fill(~allowed, float("-inf")).softmax(-1)
    z = alpha @ v
    if a_v is not None:
        rows = a_v[labels].masked_fill(zero[..., None], 0.0)
        z = z + torch.einsum("bhij,bijd->bhid", alpha, rows)
    return z


def inputs(b, h, t, d, dv, rows, seed):
    """Queries, keys, values and the tables ``a^K``, ``a^V`` (row 0, "no term", zero)."""
    torch.manual_seed(seed)
    tensors = [torch.randn(b, h, t, d) * 0.5, torch.randn(b, h, t, d), torch.randn(b, h, t, dv),
               torch.randn(rows, d).index_fill(0, torch.tensor([0]), 0.0),
               torch.randn(rows, dv).index_fill(0, torch.tensor([0]), 0.0)]
    return [x.requires_grad_() for x in tensors]


def kernel_output(q, k, v, a_k, a_v, dtype, **where):
    """``z = O + β a^V`` of the kernel with the key scores ``q (a^K)ᵀ``, in ``dtype``."""
    cast = [x.to(dtype) if x is not None else None for x in (q, k, v, a_k, a_v)]
    q, k, v, a_k, a_v = cast
    key_scores = q @ a_k.t() if a_k is not None else None
    rows = (a_k if a_k is not None else a_v).shape[0]
    out, bins = label_bins().attention(q, k, v, key_scores, rows, a_v is not None,
                                       blocks=BLOCKS, **where)
    return out.float() + (bins @ a_v.float() if bins is not None else 0.0)


def labels_of(kind: str, b: int, t: int, rows: int, seed: int):
    """(kernel keywords, labels [B, T, T]): Shaw's clipped j − i from positions, or from a
    tensor (int8) Shaw's labels but random ones (0 among them) within 6 of the diagonal, so
    that some tiles have one label and others many."""
    pos = torch.arange(t)
    shaw = ClippedDistance(pos, pos, CLIP).labels().expand(b, t, t)
    if kind == "positions":
        return {"positions": (pos, pos, CLIP)}, shaw
    near = (pos[None, :] - pos[:, None]).abs() <= 6
    noise = torch.randint(0, rows, (b, t, t), generator=torch.Generator().manual_seed(seed))
    labels = torch.where(near, noise, shaw)
    return {"labels": labels.to(torch.int8)}, labels


def key_padding(b: int, t: int) -> torch.Tensor:
    """``[B, T]``: row 1 padded after ``t − 5`` keys, row 0 not at all."""
    lengths = torch.tensor([t, t - 5, t - 1][:b])
    return torch.arange(t)[None, :] < lengths[:, None]


def compare(kind, mask, b, h, t, d, dv, parts, dtype, seed=0):
    """Largest differences of the kernel's output and gradients (w.r.t. q, k, v and the used
    tables, label 0's rows left out) from the literal equations in fp32, as a fraction of the
    reference's largest magnitude; the valid query rows only."""
    rows = 2 * CLIP + 2
    q, k, v, a_k, a_v = inputs(b, h, t, d, dv, rows, seed)
    a_k, a_v = (a_k if "key" in parts else None), (a_v if "value" in parts else None)
    where, labels = labels_of(kind, b, t, rows, seed)
    key_mask = key_padding(b, t) if mask == "padding" else None
    causal = mask == "causal"
    got = kernel_output(q, k, v, a_k, a_v, dtype, key_mask=key_mask, causal=causal, **where)
    want = literal(q, k, v, a_k, a_v, labels, key_mask, causal)
    wrt = [x for x in (q, k, v, a_k, a_v) if x is not None]
    weight = torch.randn_like(want)
    grads = torch.autograd.grad((got * weight).sum(), wrt)
    expected = torch.autograd.grad((want * weight).sum(), wrt)
    out = [float((got - want).abs().max() / want.abs().max())]
    for g, e, x in zip(grads, expected, wrt):
        if x.dim() == 2:                                     # a table: label 0 has no term
            g, e = g[1:], e[1:]
        out.append(float((g - e).abs().max() / e.abs().max()))
    return out


KEY_VALUE = {"key", "value"}


@pytest.mark.parametrize("kind,mask,t,d,dv,parts", [
    ("positions", "padding", 35, 16, 16, KEY_VALUE),
    ("positions", "causal", 35, 24, 24, KEY_VALUE),       # head width no power of 2
    ("positions", "none", 19, 16, 16, {"key"}),            # rel's key terms only
    ("tensor", "padding", 35, 16, 40, KEY_VALUE),          # values wider than keys
    ("tensor", "causal", 19, 32, 32, {"value"}),
    ("tensor", "none", 19, 8, 8, KEY_VALUE)])              # heads narrower than a tile
def test_the_kernel_equals_the_equations_in_fp32(kind, mask, t, d, dv, parts):
    """fp32, odd lengths (35: 3 × 3 tiles of 16, the last ones cut, those far from the
    diagonal of one label; 19: 2 × 2): output and every gradient within 1e-5 of the literal
    equations, relative to their largest magnitude."""
    worst = compare(kind, mask, 2, 1, t, d, dv, parts, torch.float32)
    assert max(worst) <= 1e-5, worst


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("kind", ["positions", "tensor"])
def test_the_kernel_in_half_precision_is_within_its_rounding(dtype, kind):
    """bf16 and fp16 inputs: output and gradients within 3 % of fp32's equations (bf16's
    8-bit mantissas; fp32 accumulation in the tiles)."""
    worst = compare(kind, "padding", 2, 1, 21, 16, 16, KEY_VALUE, dtype, seed=3)
    assert max(worst) <= (3e-2 if dtype == torch.bfloat16 else 5e-3), worst


def test_a_query_without_keys_gets_zero():
    """A batch row whose keys are all padding: its output is 0, not NaN, and so are the
    gradients it sends."""
    q, k, v, a_k, a_v = inputs(2, 1, 17, 16, 16, 6, 0)
    key_mask = torch.ones(2, 17, dtype=torch.bool)
    key_mask[1] = False
    pos = torch.arange(17)
    z = kernel_output(q, k, v, a_k, a_v, torch.float32, key_mask=key_mask,
                      positions=(pos, pos, CLIP))
    assert torch.equal(z[1], torch.zeros_like(z[1]))
    grads = torch.autograd.grad(z.sum(), (q, k, v))
    assert all(torch.isfinite(g).all() for g in grads)
    assert torch.equal(grads[1][1], torch.zeros_like(grads[1][1]))


def test_labels_must_come_one_way():
    q = torch.zeros(1, 1, 4, 16)
    with pytest.raises(ValueError, match="either as positions or as a label tensor"):
        label_bins().attention(q, q, q, None, 6, True)


# -- the attention layer on the kernel path ----------------------------------------------------

D_MODEL, HEADS = 32, 4
D_K = D_MODEL // HEADS


def table(rows: int) -> torch.Tensor:
    return torch.randn(rows, D_K).index_fill(0, torch.tensor([0]), 0.0).requires_grad_()


def layer_terms(kind: str, b: int, t: int) -> tuple[AttentionTerms, list]:
    """Shaw's term from positions; a tree term from a label tensor shared by the batch
    ``[T, T]``; Shaw's beside a factored term (dep+rel: the factored one as extra head
    dimensions of the kernel's heads)."""
    pos, rows = torch.arange(t), 2 * CLIP + 2
    a_k, a_v = table(rows), table(rows)
    if kind == "tensor":
        labels = torch.randint(0, rows, (t, t))
        return AttentionTerms([RelativeTerm(labels, a_k, a_v)]), [a_k, a_v]
    shaw = ClippedDistance(pos, pos, CLIP)
    terms = [RelativeTerm(shaw.labels(), a_k, a_v, None, shaw)]
    learned = [a_k, a_v]
    if kind == "positions+factors":
        factors = LabelFactors(torch.randint(0, 5, (b, t)), torch.randint(0, 5, (b, t)),
                               torch.randint(0, 6, (5, 5)))
        b_k, b_v = table(6), table(6)
        terms.append(RelativeTerm(factors.labels(), b_k, b_v, factors))
        learned += [b_k, b_v]
    return AttentionTerms(terms), learned


@pytest.mark.parametrize("kind", ["positions", "tensor", "positions+factors"])
@pytest.mark.parametrize("mask_kind", ["padding", "causal"])
def test_the_layer_on_the_kernel_equals_the_reference(kind, mask_kind, monkeypatch):
    """``DEPNMT_ATTENTION=fused`` with the interpreter: the layer attends through the kernel
    (not the explicit path, nor SDPA's extra dimensions alone), and its output and the
    gradients of the input, W^Q, W^K, W^V and the tables are those of
    :func:`reference_attention`: 1e-5 and 1e-4."""
    use_path(monkeypatch, "fused")
    torch.manual_seed(5)
    b, t = 3, 19
    attn = MultiHeadAttention(D_MODEL, HEADS).train()
    x = torch.randn(b, t, D_MODEL, requires_grad=True)
    terms, learned = layer_terms(kind, b, t)
    if mask_kind == "causal":
        mask, valid, causal = torch.ones(t, t, dtype=torch.bool).tril(), slice(None), True
    else:
        keep = key_padding(b, t)
        mask, valid, causal = keep[:, None, None, :], keep, False
    calls = counted(monkeypatch, "_attend_kernel")
    monkeypatch.setattr(attn, "_attend_with_terms", None)
    out = attn(x, x, mask, terms, causal=causal)
    ref = reference_attention(attn, x, x, mask, terms)
    wrt = [x, attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight, *learned]
    grads = torch.autograd.grad(out[valid].sum(), wrt)
    expected = torch.autograd.grad(ref[valid].sum(), wrt)
    assert calls
    assert torch.allclose(out[valid], ref[valid], atol=1e-5)
    for g, e, w in zip(grads, expected, wrt):
        if w.dim() == 2 and w.shape[0] <= 6:                 # a table: label 0 has no term
            g, e = g[1:], e[1:]
        assert torch.allclose(g, e, atol=1e-4)


# -- the schemes that use it -------------------------------------------------------------------

# (system, options, also in bf16): the interpreter takes seconds a step, so bf16 once
SCHEMES = [("abs+rel", {}, False), ("abs+rel", {"rel_terms": "key"}, False),
           ("abs+dep+rel", {}, True), ("abs+deplabel", {}, False)]


@pytest.mark.parametrize("spec,options,bf16", SCHEMES,
                         ids=[s + ("-key" if o else "") for s, o, _ in SCHEMES])
def test_schemes_train_the_same_on_the_kernel(spec, options, bf16, monkeypatch):
    """A training step of rel (encoder and the decoder's causal self-attention), rel with key
    terms only, dep+rel (dep's depths as extra dimensions beside the kernel's rel) and
    deplabel (labels read from a tensor) on the kernel: every encoder and decoder
    self-attention takes it, and the logits and every parameter's gradient are the explicit
    path's in fp32 (1e-5, 1e-4 relative to at least 1e-3 of all gradients' norm); in bf16
    (dep+rel) they are as close to fp32's as the explicit path's (the slack of
    ``test_fused_attention``)."""
    model, batch = model_and_batch(spec, options, [[2, 3, 1], [3, 2]])
    calls = counted(monkeypatch, "_attend_kernel")
    expected = run(model, batch, "explicit", monkeypatch)
    assert not calls
    floor = 1e-3 * float(torch.stack([e.norm() for e in expected[1].values()]).norm())
    logits, worst, _ = errors(run(model, batch, "fused", monkeypatch), expected, floor)
    rel = "rel" in spec
    assert len(calls) == model.cfg.encoder_layers + (model.cfg.decoder_layers if rel else 0)
    assert logits <= 1e-5 and worst <= 1e-4, (logits, worst)
    if not bf16:
        return
    explicit = errors(run(model, batch, "explicit", monkeypatch, torch.bfloat16), expected,
                      floor)
    fused = errors(run(model, batch, "fused", monkeypatch, torch.bfloat16), expected, floor)
    for ours, theirs, slack in ((fused[0], explicit[0], 1e-2), (fused[2], explicit[2], 5e-2)):
        assert ours <= 2 * theirs + slack, (fused, explicit)


def test_decoding_steps_take_the_kernel(monkeypatch):
    """Incremental decoding (one query over the cache, Shaw's labels of its position) on the
    kernel gives the explicit path's logits."""
    model, batch = model_and_batch("abs+rel", {}, [[5], [3, 2]])
    model.eval()
    steps = {}
    calls = counted(monkeypatch, "_attend_kernel")
    for mode in ("explicit", "fused"):
        use_path(monkeypatch, mode)
        with torch.no_grad():
            state = model.start_state(*model.encode(batch.src, batch.src_feats),
                                      torch.float32)
            steps[mode] = torch.cat([model.decode(batch.tgt_in[:, i:i + 1], state, True)
                                     for i in range(batch.tgt_in.shape[1])], 1)
    decoder_calls = batch.tgt_in.shape[1] * model.cfg.decoder_layers
    assert len(calls) == model.cfg.encoder_layers + decoder_calls
    assert torch.allclose(steps["fused"], steps["explicit"], atol=1e-5)

"""What the model needs to run right on a GPU, checked on the CPU: every parameter of every
scheme and option combination takes part in a training step (DDP's
``find_unused_parameters=False``); logits with key terms are scaled before they are summed,
in fp32 (no fp16 overflow); DBSA's parse scorer runs in fp32 under autocast; a training step
of every scheme runs on ``meta`` tensors (no host synchronisation); the decoder's causal
self-attention is SDPA's ``is_causal``."""

from __future__ import annotations

import itertools
from dataclasses import fields

import pytest
import torch
from test_bench import load_bench  # tests/unit is on sys.path (it has no __init__.py)

from depnmt.model.attention import (AttentionTerms, MultiHeadAttention, RelativeTerm,
                                    reference_attention)
from depnmt.model.schemes.dbsa import ParseHead
from depnmt.model.schemes.registry import SCHEMES, load_builtin_schemes
from depnmt.model.transformer import label_smoothed_nll

load_builtin_schemes()

# Options every case is built with: DBSA's layer inside the tiny model, a factor size that fits.
BASE = {"dbsa_enc_layer": 2, "dbsa_dec_layer": 2, "factor_dim": 2}
# Values of options that are no click.Choice but change the parameters a scheme builds.
EXTRA_VALUES = {"dbsa_heads": (2,), "gps_layer": ("all",), "gps_dim": (8,),
                "factors": ("subword", "label,pos,dir,subword"), "rel_k": (0,)}


def choices(f) -> tuple:
    """The click.Choice values of option field ``f`` (none for other types)."""
    return tuple(getattr(f.metadata.get("type"), "choices", ()))


def option_cases(name: str) -> list[dict]:
    """Every combination of the choices of scheme ``name``'s options, then the defaults with
    each of :data:`EXTRA_VALUES` in turn."""
    opts = fields(SCHEMES[name].Options)
    chosen = [f for f in opts if choices(f)]
    combos = [dict(zip([f.name for f in chosen], combo))
              for combo in itertools.product(*(choices(f) for f in chosen))]
    return combos + [{f.name: value} for f in opts for value in EXTRA_VALUES.get(f.name, ())]


def tiny_setup():
    return load_bench().Setup(torch.device("cpu"), d_model=16, heads=2, d_ff=16, layers=2,
                              vocab=30, src_len=9, tgt_len=8, batch_size=3, n_batches=1,
                              decode_len=2)


def tiny_model(monkeypatch, scheme: str, options: dict):
    """A tiny model of the components ``scheme`` (e.g. ``abs+rel``) with ``options`` and one
    batch of synthetic examples with trees on both sides (``bench/schemes.py``'s helpers)."""
    bench = load_bench()
    monkeypatch.setitem(bench.SYSTEMS, "case", (scheme, {**BASE, **options}))
    setup = tiny_setup()
    examples = bench.make_examples(setup)
    model = setup.model("case", examples)
    return model, bench.make_batches(setup, examples, model.schemes.schemes)[0]


def training_loss(model, batch):
    """The loss of one training step, as ``depnmt train`` forms it."""
    logits, extras = model(batch.src, batch.tgt_in, batch.src_feats, batch.tgt_feats)
    loss, _ = label_smoothed_nll(logits, batch.tgt_out, 0.1)
    for aux in extras.losses.values():
        loss = loss + aux.weight * aux.value
    return loss


def components(name: str) -> str:
    return name if name == "none" else f"abs+{name}"


@pytest.mark.parametrize("name", list(SCHEMES))
def test_every_parameter_of_every_option_gets_a_gradient(name, monkeypatch):
    """DDP runs with find_unused_parameters=False: a scheme must not build parameters that its
    options leave unused (e.g. deplabel_rel's W_rel of values with key-only ablations)."""
    unused = {}
    for options in option_cases(name):
        model, batch = tiny_model(monkeypatch, components(name), options)
        training_loss(model, batch).backward()
        missing = [n for n, p in model.named_parameters() if p.grad is None]
        if missing:
            unused[str(options)] = missing
    assert unused == {}


def test_checkpoint_with_an_unused_w_rel_still_loads(monkeypatch):
    """A deplabel_rel model of a key-only ablation saved before W^V_rel was left out (with the
    unused, never trained W^V_rel) loads into today's model."""
    model, _ = tiny_model(monkeypatch, "abs+deplabel_rel",
                          {"rel_terms": "key", "deplabel_terms": "key"})
    state = model.state_dict()
    old = {**state, "schemes.parts.1.w_rel.value": torch.randn(2, 16, 8)}
    model.load_state_dict(old)
    assert "schemes.parts.1.w_rel.value" not in model.state_dict()


# -- logits in half precision: scaled before the sum, summed in fp32 -----------------------------

def overflowing_attention(weight: float, d_model: int = 8) -> MultiHeadAttention:
    """One head (d_k = d_model) whose q·k of one-hot inputs is ``weight²`` on the diagonal:
    W^Q = W^K = weight · I, W^V = W^O = I, no biases."""
    attn = MultiHeadAttention(d_model, 1).eval()
    eye = torch.eye(d_model)
    with torch.no_grad():
        for proj, scale in ((attn.q_proj, weight), (attn.k_proj, weight), (attn.v_proj, 1.0),
                            (attn.out_proj, 1.0)):
            proj.weight.copy_(scale * eye)
            proj.bias.zero_()
    return attn


def diagonal_terms(t: int, d_k: int, key: float, value: bool) -> AttentionTerms:
    """A relative term whose label 1 (a^K = ``key`` · 1) sits on the diagonal; with ``value`` a
    value table too, and a logit scale and bias (every explicit-path term at once)."""
    table = torch.zeros(2, d_k)
    table[1] = key
    labels = torch.eye(t, dtype=torch.long)
    if not value:
        return AttentionTerms([RelativeTerm(labels, table, None)])
    return AttentionTerms([RelativeTerm(labels, table, torch.full((2, d_k), 0.5))],
                          logit_bias=torch.full((1, 1, t, t), 0.25),
                          logit_scale=torch.full((1, 1, t, t), 0.75))


@pytest.mark.parametrize("weight,key,value", [(300.0, 0.0, False), (250.0, 50.0, False),
                                              (250.0, 50.0, True)])
def test_fp16_logits_do_not_overflow_where_the_scaled_ones_fit(weight, key, value):
    """q·k (+ q·a^K) on the diagonal is 90,000 or 75,000: beyond fp16's 65,504 unscaled, about
    30,000 once divided by √d_k. Under fp16 autocast (the explicit path on the CPU) every
    output is finite and equals fp32's."""
    torch.manual_seed(0)
    t, d = 5, 8
    attn = overflowing_attention(weight, d)
    x = (torch.eye(t, d) + 0.01 * torch.randn(t, d))[None]
    terms = None if key == 0.0 else diagonal_terms(t, d, key, value)
    expected = attn(x, x, None, terms)
    with torch.autocast("cpu", dtype=torch.float16):
        out = attn(x, x, None, terms)
    assert out.dtype == torch.float16 and torch.isfinite(out).all()
    assert torch.allclose(out.float(), expected, atol=1e-2)


def test_fp16_additive_mask_of_the_fused_path_is_scaled_before_the_product():
    """The fused path's float mask ``q·a^K / √d_k + bias`` (CUDA): ``q·a^K`` alone is 75,000 in
    fp16, ~26,500 scaled."""
    attn = overflowing_attention(1.0)
    q = torch.full((1, 1, 3, 8), 37.5, dtype=torch.float16)           # q·a^K = 8·37.5·250
    table = torch.stack([torch.zeros(8), torch.full((8,), 250.0)]).half()
    terms = AttentionTerms([RelativeTerm(torch.ones(3, 3, dtype=torch.long), table, None)])
    mask = attn._additive_mask(q, None, terms)
    assert torch.isfinite(mask).all()
    assert torch.allclose(mask.float(), torch.full((1, 1, 3, 3), 75000 / 8 ** 0.5), rtol=1e-3)


def test_fp32_logits_keep_the_equation_of_the_papers():
    """In fp32 the scaled form (q/√d_k)·(k + a^K) is Eq. 12 as written, (q·k + q·a^K)/√d_k
    (:func:`reference_attention`), on the explicit and the fused path."""
    torch.manual_seed(3)
    attn = MultiHeadAttention(32, 4).eval()
    b, t, r = 2, 7, 5
    x = torch.randn(b, t, 32)
    mask = torch.tensor([[1] * 7, [1] * 5 + [0] * 2], dtype=torch.bool)[:, None, None, :]
    labels = torch.randint(0, r, (b, t, t))
    a_k, a_v = (torch.randn(r, 8).index_fill(0, torch.tensor([0]), 0.0) for _ in range(2))
    bias, scale = torch.randn(b, 4, t, t), torch.rand(b, 1, t, t) + 0.5
    valid = mask[:, 0, 0]
    for terms in (AttentionTerms([RelativeTerm(labels, a_k, a_v)], bias, logit_scale=scale),
                  AttentionTerms([RelativeTerm(labels, a_k, None)], bias)):       # fused
        fast = attn(x, x, mask, terms)
        assert torch.allclose(fast[valid], reference_attention(attn, x, x, mask, terms)[valid],
                              atol=1e-6)


# -- DBSA's parse scorer in fp32 under autocast --------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("deep,heads", [(False, 1), (True, 1), (False, 2)])
def test_parse_scorer_runs_in_fp32_under_autocast(dtype, deep, heads):
    torch.manual_seed(1)
    head = ParseHead(16, 8, deep=deep, n_heads=heads)
    with torch.no_grad():
        head.u.normal_()
    q, k = torch.randn(2, 6, 8 * heads), torch.randn(2, 6, 8 * heads)
    mask = torch.ones(6, 6, dtype=torch.bool).tril()[None, None]
    expected = head.log_probs(q, k, mask)
    with torch.autocast("cpu", dtype=dtype):
        got = head.log_probs(q, k, mask)
    assert got.dtype == torch.float32
    finite = torch.isfinite(expected)
    assert torch.equal(finite, torch.isfinite(got))
    assert torch.allclose(got[finite], expected[finite], atol=1e-5)


# -- no host synchronisation in a training step --------------------------------------------------

META = torch.device("meta")
# A scheme whose training step waits for the device, and why (an xfail, not a weaker test).
HOST_SYNCS: dict[str, str] = {}


# Options that take other code paths than the defaults (meta tensors are slow: not every case).
META_VARIANTS = {"dbsa_enc": {"dbsa_scorer": "deep", "dbsa_heads": 2},
                 "dbsa_dec": {"dbsa_heads": 2},
                 "pascal": {"pascal_weighting": "uniform", "pascal_parent_ignoring": 0.5},
                 "factors": {"factor_combine": "concat"}}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(
    reason=HOST_SYNCS[n], strict=True)) if n in HOST_SYNCS else n for n in SCHEMES])
def test_a_training_step_of_every_scheme_runs_on_meta_tensors(name, monkeypatch):
    """Forward (training mode: dropout), loss with the auxiliary losses, and backward on the
    ``meta`` device, which refuses every data-dependent host read (``.item()``, ``int(t)``,
    boolean indexing, ``nonzero``): on a GPU each would stall the host until the device has
    caught up. Default options, then :data:`META_VARIANTS`; the batch is collated with the
    model's schemes, as training does (their batch features computed on the host)."""
    for options in ({}, *([META_VARIANTS[name]] if name in META_VARIANTS else [])):
        model, batch = tiny_model(monkeypatch, components(name), options)
        training_loss(model.train().to(META), batch.to(META)).backward()


# -- the decoder's causal self-attention: SDPA's is_causal where the path is fused ---------------

def test_decoder_self_attention_leaves_the_causal_mask_to_sdpa(monkeypatch):
    """A teacher-forced decode (fused path: eval, fp32) lets SDPA apply the causal mask
    (``is_causal``); on a batch of padded targets its logits at the real positions equal
    those of the explicit causal mask."""
    import depnmt.model.attention as attention
    from depnmt.model.transformer import ModelConfig, TransformerNMT
    from depnmt.model.schemes.registry import scheme_entries
    torch.manual_seed(0)
    cfg = ModelConfig(30, 30, d_model=16, n_heads=2, d_ff=32, encoder_layers=2,
                      decoder_layers=2, dropout=0.0, schemes=scheme_entries(["abs"], {}))
    model = TransformerNMT(cfg).eval()
    src = torch.randint(4, 30, (3, 7))
    tgt_in = torch.randint(4, 30, (3, 6))
    lengths = torch.tensor([6, 4, 2])
    real = torch.arange(6)[None, :] < lengths[:, None]
    tgt_in[~real] = 0                                                   # PAD after each target
    memory, src_mask = model.encode(src, {})
    sdpa, causal_calls = attention.F.scaled_dot_product_attention, []

    def explicit(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False):
        """SDPA given the explicit causal mask instead of ``is_causal``."""
        if is_causal:
            causal_calls.append(q.shape)
            attn_mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
        return sdpa(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p)

    fused = model.decode(tgt_in, model.start_state(memory, src_mask))
    monkeypatch.setattr(attention.F, "scaled_dot_product_attention", explicit)
    masked = model.decode(tgt_in, model.start_state(memory, src_mask))
    assert len(causal_calls) == cfg.decoder_layers
    assert torch.allclose(fused[real], masked[real], atol=1e-6)


def test_absolute_pe_from_positions_is_the_table_bit_for_bit():
    """The PE computed from the positions on their device (no table sized by max(pos) on the
    host) equals the rows of the table, also beyond any fixed size and at an offset."""
    from depnmt.model.schemes.absolute import SinusoidalPE, sinusoidal_table
    for d in (16, 30, 512):
        table, pe = sinusoidal_table(3000, d), SinusoidalPE(d)
        for pos in (torch.arange(7), torch.arange(1020, 1030), torch.tensor([2999])):
            assert torch.equal(pe.embed(torch.zeros(1, len(pos), d), "tgt", pos, {})[0],
                               table[pos])


def test_gps_syntax_term_in_fp16_is_scaled_before_the_product():
    """(s_i W_s^Q)·(s_j W_s^K) is 100,000 here (beyond fp16), ~35,000 once divided by √d_k:
    under fp16 autocast the term is finite and equals fp32's."""
    from depnmt.model.schemes.base import ModelDims
    from depnmt.model.schemes.gps import GPSModule
    gps = GPSModule(ModelDims(8, 1, 1, 1), n_labels=4, dim=8, layers=[0])
    with torch.no_grad():
        for proj in (gps.query["0"], gps.key["0"]):      # every q and k component √(1e5 / 8)
            proj.weight.fill_((1e5 / 8) ** 0.5 / 8)
    feats = {"gps_s": torch.ones(1, 3, 8), "gps_sentence": torch.tensor([[1, 1, 0]])}
    with torch.no_grad():
        expected = gps.syntax_logits(0, feats)
        with torch.autocast("cpu", dtype=torch.float16):
            got = gps.syntax_logits(0, feats)
    assert torch.isfinite(got).all()
    assert expected[0, 0, 0, 0] == pytest.approx(1e5 / 8 ** 0.5, rel=1e-4)
    assert torch.allclose(got.float(), expected, rtol=1e-2)

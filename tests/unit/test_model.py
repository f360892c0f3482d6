"""Transformer, attention and search: the fast paths against literal formulas."""

from __future__ import annotations

import math

import pytest
import torch

from depnmt.core.vocab import BOS, EOS, PAD
from depnmt.decoding.search import SearchConfig, beam_search, greedy_search, length_penalty
from depnmt.model.attention import (AttentionTerms, MultiHeadAttention, RelativeTerm,
                                    reference_attention)
from depnmt.model.schemes.absolute import sinusoidal_table
from depnmt.model.schemes.registry import scheme_entries
from depnmt.model.transformer import ModelConfig, TransformerNMT, label_smoothed_nll


def literal_attention(attn: MultiHeadAttention, x: torch.Tensor, mask: torch.Tensor,
                      labels: torch.Tensor, a_k: torch.Tensor, a_v: torch.Tensor,
                      bias: torch.Tensor | None = None) -> torch.Tensor:
    """Shaw et al. (2018) with tables ``a_k``, ``a_v`` (plus an additive logit ``bias``), by
    :func:`reference_attention`."""
    return reference_attention(attn, x, x, mask,
                               AttentionTerms([RelativeTerm(labels, a_k, a_v)], bias))


def test_relative_terms_equal_literal_equations():
    torch.manual_seed(0)
    attn = MultiHeadAttention(32, 4).eval()
    b, t, r = 3, 9, 7
    x = torch.randn(b, t, 32)
    lengths = torch.tensor([9, 6, 2])
    mask = (torch.arange(t)[None, :] < lengths[:, None])[:, None, None, :]
    labels = torch.randint(0, r, (b, t, t))
    a_k, a_v = torch.randn(r, 8), torch.randn(r, 8)
    a_k[0] = 0
    a_v[0] = 0
    fast = attn(x, x, mask, AttentionTerms([RelativeTerm(labels, a_k, a_v)]))
    slow = literal_attention(attn, x, mask, labels, a_k, a_v)
    valid = torch.arange(t)[None, :] < lengths[:, None]
    assert torch.allclose(fast[valid], slow[valid], atol=1e-5)


def test_additive_terms_take_the_fused_path_and_equal_literal_equations(monkeypatch):
    """Key terms without value terms, and logit biases (GPS), go through SDPA with a float mask;
    outputs and gradients (of the table and the bias) equal the literal equations."""
    torch.manual_seed(2)
    attn = MultiHeadAttention(32, 4).train()            # dropout 0: training mode, deterministic
    b, t, r = 3, 9, 7
    x = torch.randn(b, t, 32)
    lengths = torch.tensor([9, 6, 2])
    mask = (torch.arange(t)[None, :] < lengths[:, None])[:, None, None, :]
    labels = torch.randint(0, r, (b, t, t))
    a_k = torch.randn(r, 8).index_fill(0, torch.tensor([0]), 0.0).requires_grad_()
    bias = torch.randn(b, 4, t, t, requires_grad=True)
    monkeypatch.setattr(attn, "_attend_with_terms", None)       # the explicit path is not taken
    valid = torch.arange(t)[None, :] < lengths[:, None]
    for terms, literal_bias in ((AttentionTerms([RelativeTerm(labels, a_k, None)], bias), bias),
                                (AttentionTerms([RelativeTerm(labels, a_k, None)]), None),
                                (AttentionTerms([], logit_bias=bias), bias)):
        fast = attn(x, x, mask, terms)
        grads = torch.autograd.grad(fast[valid].sum(), [a_k, bias], allow_unused=True)
        key = a_k if terms.relative else torch.zeros(r, 8)
        slow = literal_attention(attn, x, mask, labels, key, torch.zeros(r, 8), literal_bias)
        expected = torch.autograd.grad(slow[valid].sum(), [a_k, bias], allow_unused=True)
        assert torch.allclose(fast[valid], slow[valid], atol=1e-5)
        for g, e in zip(grads, expected):
            assert (g is None) == (e is None) and (g is None or torch.allclose(g, e, atol=1e-4))


def test_every_kind_of_term_at_once_equals_the_reference():
    """Relative key and value terms ([B, T, T] and shared [T, T] labels), a logit scale, a
    logit bias and a head override together, against :func:`reference_attention`."""
    from depnmt.model.attention import HeadOverride, HeadResult, KeyValues
    torch.manual_seed(5)
    attn = MultiHeadAttention(32, 4).eval()
    b, t, r = 2, 6, 5
    x = torch.randn(b, t, 32)
    mask = torch.tensor([[1] * 6, [1] * 4 + [0] * 2], dtype=torch.bool)[:, None, None, :]
    tables = [torch.randn(r, 8).index_fill(0, torch.tensor([0]), 0.0) for _ in range(3)]
    own = torch.randn(b, t, 8)
    terms = AttentionTerms(
        [RelativeTerm(torch.randint(0, r, (b, t, t)), tables[0], tables[1]),
         RelativeTerm(torch.randint(0, r, (t, t)), None, tables[2])],
        logit_bias=torch.randn(b, 4, t, t),
        head_overrides=[HeadOverride(1, lambda *a: HeadResult(own, KeyValues(own, own)))],
        logit_scale=torch.rand(b, 1, t, t) + 0.5)
    fast = attn(x, x, mask, terms)
    slow = reference_attention(attn, x, x, mask, terms)
    assert torch.allclose(fast, slow, atol=1e-5)
    terms.logit_scale = None
    assert not torch.allclose(attn(x, x, mask, terms), slow, atol=1e-3)   # the scale mattered


def test_no_terms_uses_fused_path_with_same_result():
    torch.manual_seed(1)
    attn = MultiHeadAttention(16, 2).eval()
    x = torch.randn(2, 5, 16)
    mask = torch.ones(2, 1, 1, 5, dtype=torch.bool)
    zero = torch.zeros(3, 8)
    fused = attn(x, x, mask)
    explicit = attn(x, x, mask, AttentionTerms([RelativeTerm(torch.zeros(5, 5, dtype=torch.long),
                                                              zero, zero)]))
    assert torch.allclose(fused, explicit, atol=1e-6)


def test_attention_dropout_on_the_cpu_uses_the_cheap_mask_on_the_weights():
    """Training with attention dropout on the CPU: softmax, then depnmt's dropout of the weights
    (the same RNG draws as a literal computation), with and without terms."""
    from depnmt.model.dropout import dropout
    torch.manual_seed(4)
    attn = MultiHeadAttention(16, 2, dropout=0.3).train()
    x = torch.randn(2, 5, 16)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], dtype=torch.bool)[:, None, None, :]
    bias = torch.randn(2, 2, 5, 5)
    for terms in (None, AttentionTerms([], logit_bias=bias)):
        state = torch.get_rng_state()
        fast = attn(x, x, mask, terms)
        torch.set_rng_state(state)
        q, k, v = (p(x).view(2, 5, 2, 8).transpose(1, 2)
                   for p in (attn.q_proj, attn.k_proj, attn.v_proj))
        e = q @ k.transpose(-1, -2) / math.sqrt(8) + (0.0 if terms is None else bias)
        alpha = dropout(e.masked_fill(~mask, float("-inf")).softmax(-1), 0.3)
        slow = attn.out_proj((alpha @ v).transpose(1, 2).reshape(2, 5, 16))
        assert torch.allclose(fast, slow, atol=1e-5)
        assert not torch.allclose(fast, attn.eval()(x, x, mask, terms), atol=1e-3)
        attn.train()


def test_sinusoidal_table_matches_formula():
    table = sinusoidal_table(50, 16)
    pos, i = 7, 3
    assert table[pos, 2 * i] == pytest.approx(math.sin(pos / 10000 ** (2 * i / 16)), abs=1e-6)
    assert table[pos, 2 * i + 1] == pytest.approx(math.cos(pos / 10000 ** (2 * i / 16)), abs=1e-6)


def tiny_model(scheme=("abs",), seed=0) -> TransformerNMT:
    torch.manual_seed(seed)
    cfg = ModelConfig(40, 50, d_model=32, n_heads=4, d_ff=64, encoder_layers=2,
                      decoder_layers=2, dropout=0.0, schemes=scheme_entries(list(scheme), {}))
    return TransformerNMT(cfg).eval()


def random_src(b=3, s=7, vocab=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, vocab, (b, s), generator=g)
    src[:, -1] = EOS
    src[0, 4], src[0, 5:] = EOS, PAD
    return src


def test_incremental_decoding_equals_full_recomputation():
    model = tiny_model()
    src = random_src()
    tgt = torch.randint(4, 50, (3, 6))
    full = model(src, tgt, {})[0]
    memory, mask = model.encode(src, {})
    state = model.start_state(memory, mask)
    steps = [model.decode(tgt[:, i:i + 1], state, incremental=True) for i in range(6)]
    assert torch.allclose(torch.cat(steps, 1), full, atol=1e-5)


def test_padding_does_not_change_encoding():
    model = tiny_model()
    src = random_src()
    alone = model.encode(src[:1, :5], {})[0]
    batched = model.encode(src, {})[0][:1, :5]
    assert torch.allclose(alone, batched, atol=1e-5)


def sequence_logprob(model, src, hyp):
    tgt_in = torch.tensor([[BOS] + hyp])
    tgt_out = torch.tensor([hyp + [EOS]])
    with torch.no_grad():
        return -float(label_smoothed_nll(model(src, tgt_in, {})[0], tgt_out, 0.0)[1])


def test_beam_finds_at_least_greedy_probability():
    model = tiny_model(seed=3)
    src = random_src(b=1, s=6, seed=5)
    cfg = SearchConfig(beam=8, alpha=0.0, max_len_a=0.0, max_len_b=6)
    greedy = greedy_search(model, src, {}, SearchConfig(beam=1, max_len_a=0.0, max_len_b=6))[0]
    beam = beam_search(model, src, {}, cfg)[0]
    assert sequence_logprob(model, src, beam) >= sequence_logprob(model, src, greedy) - 1e-5


def test_beam_is_exact_on_exhaustive_search():
    """A beam wider than every prefix set is exhaustive: it must return the most probable
    hypothesis (alpha = 0). Allowed tokens are UNK, 4, 5 (PAD and BOS are banned, EOS ends)."""
    import itertools
    torch.manual_seed(0)
    cfg = ModelConfig(8, 6, d_model=16, n_heads=2, d_ff=32, encoder_layers=1, decoder_layers=1,
                      dropout=0.0)
    model = TransformerNMT(cfg).eval()
    src = torch.tensor([[5, 6, EOS]])
    limit = 3                                   # at most limit - 1 tokens, then EOS is forced
    candidates = [list(h) for n in range(limit) for h in itertools.product([1, 4, 5], repeat=n)]
    best_lp = max(sequence_logprob(model, src, h) for h in candidates)
    found = beam_search(model, src, {}, SearchConfig(beam=16, alpha=0.0, max_len_a=0.0,
                                                     max_len_b=limit))[0]
    assert found in candidates
    assert sequence_logprob(model, src, found) == pytest.approx(best_lp, abs=1e-5)


def test_beam_at_limit_cut_is_exact_on_exhaustive_search():
    """``at_limit="cut"`` (OpenNMT-py, CTranslate2): the candidates are the hypotheses that end
    with EOS before the limit (scored with EOS) and those cut at limit − 1 tokens (scored
    without EOS); an exhaustive beam must return the best of them, and ``eos`` must not."""
    import itertools
    torch.manual_seed(4)                   # a model whose best hypothesis is a cut one
    cfg = ModelConfig(8, 6, d_model=16, n_heads=2, d_ff=32, encoder_layers=1, decoder_layers=1,
                      dropout=0.0)
    model = TransformerNMT(cfg).eval()
    src = torch.tensor([[5, 6, EOS]])
    limit = 3

    def cut_logprob(hyp):
        with torch.no_grad():
            logits = model(src, torch.tensor([[BOS] + hyp[:-1]]), {})[0]
        return float(torch.log_softmax(logits[0], -1)[torch.arange(len(hyp)), hyp].sum())
    ended = {tuple(h): sequence_logprob(model, src, list(h)) for n in range(limit - 1)
             for h in itertools.product([1, 4, 5], repeat=n)}
    cut = {h: cut_logprob(list(h)) for h in itertools.product([1, 4, 5], repeat=limit - 1)}
    best = max({**ended, **cut}.items(), key=lambda kv: kv[1])
    search_cfg = dict(beam=16, alpha=0.0, max_len_a=0.0, max_len_b=limit)
    found = beam_search(model, src, {}, SearchConfig(**search_cfg, at_limit="cut"))[0]
    assert tuple(found) == best[0]
    assert best[0] in cut                  # this model's best is a cut one, so eos differs
    assert beam_search(model, src, {}, SearchConfig(**search_cfg, at_limit="eos"))[0] != found


def test_beam_at_limit_cut_batched_equals_alone():
    """``cut``: sentences leave the batch at their own limit (never more than limit − 1 tokens)
    and each result is that of the sentence decoded alone."""
    model, src = peaky_model_and_sources()
    cfg = SearchConfig(beam=4, alpha=0.6, max_len_a=1.5, max_len_b=2, at_limit="cut")
    batched = beam_search(model, src, {}, cfg)
    alone = [beam_search(model, src[i:i + 1, :int((src[i] != PAD).sum())], {}, cfg)[0]
             for i in range(src.shape[0])]
    assert batched == alone
    limits = (torch.ceil(((src != PAD).sum(1) - 1) * 1.5 + 2).long() - 1).tolist()
    assert all(len(h) <= n for h, n in zip(batched, limits))
    assert batched != BEAM_BEFORE                      # the rule changed some outputs (eos)


def test_length_penalty_is_gnmt():
    assert length_penalty(1, 0.6) == pytest.approx(1.0)
    assert length_penalty(10, 0.6) == pytest.approx(((5 + 10) / 6) ** 0.6)


def test_label_smoothing_ignores_padding_and_reduces_to_nll():
    logits = torch.randn(2, 3, 10)
    target = torch.tensor([[4, 5, PAD], [6, PAD, PAD]])
    loss, nll = label_smoothed_nll(logits, target, 0.0)
    assert loss == pytest.approx(float(nll))
    manual = -sum(float(torch.log_softmax(logits[i, j], -1)[target[i, j]])
                  for i, j in [(0, 0), (0, 1), (1, 0)])
    assert float(nll) == pytest.approx(manual, rel=1e-5)


def test_tied_embeddings_share_storage():
    model = tiny_model()
    assert model.output.weight.data_ptr() == model.tgt_embed.weight.data_ptr()


def test_prefetch_preserves_order_and_raises():
    from depnmt.data.batches import prefetch
    assert list(prefetch(iter(range(50)), depth=3)) == list(range(50))

    def broken():
        yield 1
        raise ValueError("boom")
    with pytest.raises(ValueError, match="boom"):
        list(prefetch(broken()))


def peaky_model_and_sources(seed=0):
    """A tiny abs+rel model whose output layer is scaled up (EOS wins at varied steps, so
    sentences finish at different times) and 7 sources of lengths 2..9 with padding."""
    torch.manual_seed(seed)
    cfg = ModelConfig(30, 30, d_model=32, n_heads=4, d_ff=64, encoder_layers=2,
                      decoder_layers=2, dropout=0.0, schemes=scheme_entries(["abs", "rel"], {}))
    model = TransformerNMT(cfg).eval()
    with torch.no_grad():
        model.output.weight.mul_(3.0)
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, 30, (7, 9), generator=g)
    lengths = torch.randint(2, 10, (7,), generator=g)
    for i in range(7):
        src[i, lengths[i] - 1] = EOS
        src[i, lengths[i]:] = PAD
    return model, src


# Produced by depnmt 0e880a7's beam search (before finished sentences left the batch and before
# the source side stopped being re-indexed every step): beam 4, alpha 0.6, a = 1.5, b = 2.
BEAM_BEFORE = [[20, 20, 20, 20, 20, 20], [27] * 13, [4] * 9, [4] * 6, [20, 20, 27], [6, 6, 6],
               [27] * 9]


def test_beam_output_unchanged_by_batch_shrinking():
    model, src = peaky_model_and_sources()
    cfg = SearchConfig(beam=4, alpha=0.6, max_len_a=1.5, max_len_b=2)
    assert beam_search(model, src, {}, cfg) == BEAM_BEFORE


def test_beam_batched_equals_each_sentence_alone():
    """Sentences leave the batch as they finish; each result is that of the sentence alone."""
    model, src = peaky_model_and_sources()
    for cfg in (SearchConfig(3, 0.0, 1.0, 1), SearchConfig(5, 1.0, 0.5, 4)):
        batched = beam_search(model, src, {}, cfg)
        alone = [beam_search(model, src[i:i + 1, :int((src[i] != PAD).sum())], {}, cfg)[0]
                 for i in range(src.shape[0])]
        assert batched == alone
        assert len({len(h) for h in batched}) > 2          # sentences did finish at varied steps

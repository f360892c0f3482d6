"""The stacked projections of training: a self-attention's W^Q, W^K, W^V in one matrix
multiply, and every decoder layer's cross-attention W^K, W^V in one. Same values and the same
gradients for every weight as the projections one by one; the self-attention takes the
stacked path only for self-attention (not cross-attention, not over a decoding cache)."""

from __future__ import annotations

import torch

from depnmt.model.attention import MultiHeadAttention
from depnmt.model.schemes.registry import scheme_entries
from depnmt.model.transformer import ModelConfig, TransformerNMT


def test_project_self_equals_the_three_projections_and_their_gradients():
    torch.manual_seed(0)
    attn = MultiHeadAttention(16, 4)
    x = torch.randn(3, 5, 16)
    stacked = attn.project_self(x)
    one_by_one = (attn.split_heads(attn.q_proj(x)), *attn.project_kv(x))
    for a, b in zip(stacked, one_by_one):
        assert a.shape == (3, 4, 5, 4) and torch.allclose(a, b, atol=1e-6)
    weights = torch.randn(3, 3, 4, 5, 4)
    sum((w * t).sum() for w, t in zip(weights, stacked)).backward()
    grads = {n: p.grad.clone() for n, p in attn.named_parameters() if p.grad is not None}
    attn.zero_grad()
    sum((w * t).sum() for w, t in zip(weights, one_by_one)).backward()
    assert len(grads) == 6                                # W and b of Q, K, V; not W^O
    for name, g in grads.items():
        assert torch.allclose(g, dict(attn.named_parameters())[name].grad, atol=1e-5), name


def test_self_attention_uses_the_stacked_path_only_over_one_input(monkeypatch):
    attn = MultiHeadAttention(16, 4).eval()
    calls = []
    real = MultiHeadAttention.project_self
    monkeypatch.setattr(MultiHeadAttention, "project_self",
                        lambda self, x: calls.append(x.shape) or real(self, x))
    x, memory = torch.randn(2, 5, 16), torch.randn(2, 7, 16)
    attn(x, x)
    assert calls == [(2, 5, 16)]
    attn(x, memory)                                       # cross-attention: Q of x, K/V of memory
    attn(x, x, cached_kv=attn.project_kv(x))              # over a cache
    assert calls == [(2, 5, 16)]


def test_cross_kv_equals_each_layers_projections():
    torch.manual_seed(0)
    cfg = ModelConfig(30, 30, d_model=16, n_heads=4, d_ff=32, encoder_layers=2,
                      decoder_layers=3, schemes=scheme_entries(["abs"], {}))
    model = TransformerNMT(cfg)
    memory = torch.randn(2, 6, 16, requires_grad=True)
    stacked = model.cross_kv(memory)
    per_layer = [layer.cross_attn.project_kv(memory) for layer in model.decoder]
    assert len(stacked) == 3
    for (k, v), (k1, v1) in zip(stacked, per_layer):
        assert k.shape == (2, 4, 6, 4)
        assert torch.allclose(k, k1, atol=1e-6) and torch.allclose(v, v1, atol=1e-6)
    sum(k.sum() + 2 * v.sum() for k, v in stacked).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    sum(k.sum() + 2 * v.sum() for k, v in per_layer).backward()
    assert grads and all(torch.allclose(g, dict(model.named_parameters())[n].grad, atol=1e-5)
                         for n, g in grads.items())

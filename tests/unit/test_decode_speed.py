"""The beam search's decoder step does no work it need not: keys/values cached once in the
layout and dtype attention reads (no copy of a cache per step), and no pass over the
vocabulary that masks nothing (the length-limit mask only where a sentence is at its limit)."""

from __future__ import annotations

import torch
from torch.profiler import ProfilerActivity, profile

from depnmt.core.device import autocast
from depnmt.core.vocab import EOS, PAD
from depnmt.decoding.search import SearchConfig, beam_search, greedy_nbest, greedy_search
from depnmt.model.schemes.registry import scheme_entries
from depnmt.model.transformer import ModelConfig, TransformerNMT, cached, decoding_dtype

VOCAB = 40


def tiny_model() -> TransformerNMT:
    """A random 1+2-layer abs model (d_model 32, 4 heads)."""
    torch.manual_seed(0)
    cfg = ModelConfig(VOCAB, VOCAB, d_model=32, n_heads=4, d_ff=64, encoder_layers=1,
                      decoder_layers=2, dropout=0.0, schemes=scheme_entries(["abs"], {}))
    return TransformerNMT(cfg).eval()


def sources(b: int = 6, s: int = 9) -> torch.Tensor:
    """``b`` sources ``[b, s]`` of 3 to ``s`` ids (EOS last), PAD after."""
    g = torch.Generator().manual_seed(3)
    src = torch.randint(4, VOCAB, (b, s), generator=g)
    for i in range(b):
        n = 3 + i % (s - 3)
        src[i, n - 1], src[i, n:] = EOS, PAD
    return src


def ops(fn) -> list[tuple[str, list]]:
    """(name, input shapes) of every aten op ``fn()`` runs on the CPU."""
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        fn()
    return [(e.name, e.input_shapes) for e in prof.events()]


def test_cached_keys_are_contiguous_in_the_cache_dtype():
    split = torch.randn(3, 5, 4, 8).transpose(1, 2)          # (N, H, T, d_k), a strided view
    kept = cached(split, torch.float32)
    assert kept.is_contiguous() and torch.equal(kept, split)
    assert cached(split, None) is split
    assert decoding_dtype(torch.zeros(1)) == torch.float32    # the CPU's search


def test_a_cpu_search_under_bf16_autocast_copies_no_cache_per_step():
    """Under bf16 autocast (the CPU's ``--precision auto``) the attention reads fp32 caches
    whose keys are contiguous: no ``[N, H, d_k, T]`` copy of a key cache before ``q @ k^T``
    (before: one per attention call and step), and no cast of a cache."""
    model, src = tiny_model(), sources(b=5)      # rows of the beam: multiples of 3, never 5
    cfg = SearchConfig(beam=3, max_len_a=1.0, max_len_b=4)
    with torch.no_grad(), autocast(torch.device("cpu"), torch.bfloat16):
        events = ops(lambda: beam_search(model, src, {}, cfg))
    d_k = 32 // 4
    shapes = [s[0] for name, s in events if name == "aten::copy_" and s and len(s[0]) == 4]
    per_step = [s for s in shapes if s[0] % 3 == 0 and s[1] == 4 and d_k in s[2:] and
                max(s[2:]) > 1 and sorted(s[2:])[0] > 1]        # (N, H, T or d_k, d_k or T)
    assert len(shapes) > 20 and per_step == []


def test_steps_before_every_limit_run_no_length_limit_mask():
    """The ``[n·K, V]`` mask that leaves only EOS at the length limit is built only at steps
    where a sentence is at its limit (known on the host without a read)."""
    model, src = tiny_model(), sources()
    cfg = SearchConfig(beam=3, max_len_a=1.0, max_len_b=4)
    events = ops(lambda: beam_search(model, src, {}, cfg))
    masks = [s for name, s in events if name == "aten::masked_fill"
             and s and s[0] and s[0][-1] == VOCAB]
    steps = sum(1 for name, s in events if name == "aten::topk")
    limits = ((src != PAD).sum(1) - 1).float() * cfg.max_len_a + cfg.max_len_b
    at_limit = steps - (int(limits.min()) - 1)          # steps from the first limit on
    assert steps >= 6 and 1 <= len(masks) <= at_limit


def test_fused_qkv_steps_give_the_logits_of_three_projections(monkeypatch):
    """A search's state projects each step's queries, keys and values by one matrix multiply
    (weights stacked once, in autocast's dtype under autocast): the same logits, bit for bit,
    as the three projections, in fp32 and under bf16 autocast (with F.linear for both: oneDNN's
    packed kernels round fp32 sums in their own order, tests/unit/test_packed.py)."""
    import depnmt.model.packed
    monkeypatch.setattr(depnmt.model.packed, "KERNELS", False)
    model, src = tiny_model(), sources()
    tgt = torch.randint(4, VOCAB, (src.shape[0], 5), generator=torch.Generator().manual_seed(1))
    for amp in (None, torch.bfloat16):
        with torch.no_grad(), autocast(torch.device("cpu"), amp):
            memory, mask = model.encode(src, {})
            fused = model.start_state(memory, mask, torch.float32)
            three = model.start_state(memory, mask, torch.float32)
            assert all(c.qkv is not None and c.qkv.weight.shape == (96, 32)
                       for c in fused.caches)
            assert fused.caches[0].qkv.weight.dtype == (amp or torch.float32)
            for c in three.caches:
                c.qkv = None
            for i in range(tgt.shape[1]):
                step = tgt[:, i:i + 1]
                assert torch.equal(model.decode(step, fused, incremental=True),
                                   model.decode(step, three, incremental=True))


def test_plain_greedy_runs_no_log_softmax_but_its_nbest_does():
    """Greedy output needs only the arg-max: no ``[B, V]`` log-softmax a step (it was computed
    for the n-best score even when nobody asked); ``greedy_nbest`` still scores."""
    model, src = tiny_model(), sources()
    cfg = SearchConfig(beam=1, max_len_a=1.0, max_len_b=4)
    with torch.no_grad():
        plain = ops(lambda: greedy_search(model, src, {}, cfg))
        scored = ops(lambda: greedy_nbest(model, src, {}, cfg))
    assert not [name for name, _ in plain if "log_softmax" in name]
    assert [name for name, _ in scored if "log_softmax" in name]

"""The training loop's CUDA and distributed paths, checked on the CPU: the Adam kernel per
device, pinned batches, lazy features (DistributedDataParallel itself:
``tests/cli/test_cuda_paths_train_cli.py``)."""

from __future__ import annotations

import pytest
import torch
from torch import nn


def test_adam_is_fused_on_cuda_where_torch_has_it_and_unchanged_on_the_cpu(monkeypatch):
    from depnmt.training.step import adam, adam_kernel
    assert adam_kernel(torch.device("cuda:0")) == {"fused": True}
    assert adam_kernel(torch.device("cpu")) == {}
    optimizer = adam(nn.Linear(2, 2).parameters(), 1e-3, torch.device("cpu"))
    assert optimizer.defaults["betas"] == (0.9, 0.98) and optimizer.defaults["eps"] == 1e-9

    class OldAdam(torch.optim.Adam):        # torch before the fused kernel
        def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, foreach=None):
            super().__init__(params, lr=lr, betas=betas, eps=eps, foreach=foreach)

    monkeypatch.setattr(torch.optim, "Adam", OldAdam)
    assert adam_kernel(torch.device("cuda")) == {"foreach": True}


def test_pinned_batches_keep_their_host_counts(monkeypatch):
    """On CUDA the prefetch thread pins every tensor of every batch (``Tensor.pin_memory`` needs
    a GPU: here it is recorded); the token counts travel with the batch, so reading them on
    the device never waits for it."""
    from depnmt.data.batches import Example, TokenBatcher, example_lengths, iterate_updates, pinned
    examples = [Example(i, [5 + i % 3] * (2 + i % 4) + [3], [6] * (1 + i % 5)) for i in range(12)]
    batcher = TokenBatcher(example_lengths(examples), 20, seed=1)
    seen = []
    monkeypatch.setattr(torch.Tensor, "pin_memory",
                        lambda self: seen.append(self.data_ptr()) or self.clone())
    updates = list(iterate_updates(examples, batcher, 1, 2))
    for (done, plain), (done2, pins) in zip(updates, pinned(iter(updates))):
        assert done == done2
        for a, b in zip(plain, pins):
            assert b.counts == (a.n_tokens, a.n_src_tokens) == (int((a.tgt_out != 0).sum()),
                                                                 int((a.src != 0).sum()))
            assert torch.equal(a.src, b.src) and torch.equal(a.tgt_out, b.tgt_out)
            assert b.to(torch.device("cpu")).counts == b.counts
    assert len(seen) == 3 * sum(len(batches) for _, batches in updates)    # src, tgt_in, tgt_out


@pytest.mark.parametrize("name", ["dep+rel", "dbsa-enc+dec"])
def test_lazy_features_are_the_precomputed_ones(name):
    """With several processes the batches compute their examples' features when collated
    (no rank keeps the corpus's): the batches are the ones precomputed features give, with the
    schemes' batch-level features (e.g. dep's depth range), which only a collate that is given
    the schemes adds."""
    from dataclasses import replace

    from test_bench import load_bench  # tests/unit is on sys.path (it has no __init__.py)

    from depnmt.data.batches import TokenBatcher, batch_features, example_lengths, iterate_updates
    bench = load_bench()
    setup = bench.Setup(torch.device("cpu"), d_model=16, heads=2, d_ff=16, layers=2, vocab=30,
                        src_len=9, tgt_len=8, batch_size=3, n_batches=4, decode_len=2)
    examples = bench.make_examples(setup)
    model = setup.model(name, examples)                 # adds the features to the examples
    bare = [replace(e, feats={}, tgt_feats={}) for e in examples]
    batcher = TokenBatcher(example_lengths(examples), 30)
    for rank in (0, 1):
        eager = list(iterate_updates(examples, batcher, 1, 2, rank=rank, world=2))
        lazy = list(iterate_updates(bare, batcher, 1, 2, rank=rank, world=2,
                                    schemes=model.schemes.schemes))
        assert [d for d, _ in eager] == [d for d, _ in lazy] and eager
        for a, b in zip((b for _, bs in eager for b in bs), (b for _, bs in lazy for b in bs)):
            for side in ("src_feats", "tgt_feats"):
                fa, fb = getattr(a, side), getattr(b, side)
                if side == "src_feats":
                    fa = batch_features(dict(fa), model.schemes.schemes)
                assert fa.keys() == fb.keys() and all(torch.equal(fa[k], fb[k]) for k in fa)
            assert a.src_feats
    assert all(not e.feats and not e.tgt_feats for e in bare)

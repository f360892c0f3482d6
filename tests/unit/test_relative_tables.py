"""Relative tables without autograd are built once per layer and follow parameter updates."""

from __future__ import annotations

import torch

from depnmt.model.schemes.relative import RelativeTables


def test_tables_are_kept_while_decoding_and_follow_updates():
    tables = RelativeTables(layers=2, rows=5, d_k=4, terms={"key", "value"})
    with torch.no_grad():
        first = tables.tables(1)
        assert all(a is b for a, b in zip(first, tables.tables(1)))   # kept, not rebuilt
        assert torch.equal(first[0][0], torch.zeros(4))               # row 0: "no term"
        assert torch.equal(first[0][1:], tables.key[1])
        tables.key.add_(1.0)                                          # an optimizer step
        after = tables.tables(1)
        assert torch.equal(after[0][1:], tables.key[1]) and not torch.equal(after[0], first[0])
        tables.double()                                               # other tensors
        assert tables.tables(1)[1].dtype == torch.float64
    trained = tables.tables(0)
    assert trained[0].requires_grad and trained[0].grad_fn is not None   # training: built anew

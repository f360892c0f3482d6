"""Tiny models and sources for the tests of decoding-time layer replacements (int8, packed
weights): 2 + 2 layers, d_model 32, 4 heads, a scheme with DBSA's decoder parse head."""

from __future__ import annotations

import torch

from depnmt.core.vocab import EOS, PAD
from depnmt.model.schemes.names import resolve
from depnmt.model.schemes.registry import scheme_entries
from depnmt.model.transformer import ModelConfig, TransformerNMT

SRC_VOCAB = 40


def scheme_model(scheme: str = "abs+rel+dbsa_dec", tgt_vocab: int = 50) -> TransformerNMT:
    """A seeded model of ``scheme`` in eval mode (DBSA's decoder head in layer 2)."""
    torch.manual_seed(0)
    cfg = ModelConfig(SRC_VOCAB, tgt_vocab, d_model=32, n_heads=4, d_ff=64, encoder_layers=2,
                      decoder_layers=2, dropout=0.0,
                      schemes=scheme_entries(resolve(scheme), {"dbsa_dec_layer": 2}))
    return TransformerNMT(cfg).eval()


def padded_source(b: int = 3, s: int = 7,
                  generator: torch.Generator | None = None) -> torch.Tensor:
    """Source ids ``[b, s]`` ending in EOS, the first sentence shorter (EOS at 4, then PAD)."""
    src = torch.randint(4, SRC_VOCAB, (b, s), generator=generator)
    src[:, -1] = EOS
    src[0, 4], src[0, 5:] = EOS, PAD
    return src

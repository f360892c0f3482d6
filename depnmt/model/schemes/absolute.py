"""``abs`` — sinusoidal absolute positional encoding (Vaswani et al. 2017; Omote et al. 2019 §3.1):

    PE(pos, 2i) = sin(pos / 10000^{2i/d_model}),  PE(pos, 2i+1) = cos(pos / 10000^{2i/d_model})

added to the (scaled) token embeddings of the encoder and the decoder. ``none`` adds nothing.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .base import ModelDims, Scheme, SchemeModule
from .registry import register


def sinusoidal_table(max_len: int, d_model: int) -> Tensor:
    """``[max_len, d_model]`` table of the sinusoidal PE above."""
    pos = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
    div = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    table = torch.zeros(max_len, d_model)
    table[:, 0::2] = torch.sin(pos * div)
    table[:, 1::2] = torch.cos(pos * div)[:, : d_model // 2]
    return table


class SinusoidalPE(SchemeModule):
    """Adds ``PE(pos)`` to the embeddings of both sides; the table grows on demand."""

    def __init__(self, d_model: int, max_len: int = 1024):
        super().__init__()
        self.d_model = d_model
        self.register_buffer("table", sinusoidal_table(max_len, d_model), persistent=False)

    def embed(self, x: Tensor, side: str, positions: Tensor, feats: dict[str, Tensor]) -> Tensor:
        needed = int(positions.max()) + 1 if positions.numel() else 0
        if needed > self.table.shape[0]:
            self.table = sinusoidal_table(max(needed, 2 * self.table.shape[0]),
                                          self.d_model).to(self.table.device)
        return x + self.table[positions].to(x.dtype)


@register
class Absolute(Scheme):
    name = "abs"
    help = "sinusoidal absolute positions (Transformer_abs)"

    def build(self, dims: ModelDims) -> SchemeModule:
        return SinusoidalPE(dims.d_model)


@register
class NoPositions(Scheme):
    name = "none"
    help = "no positional information at all (a bag of words; for ablations)"

"""``abs`` — sinusoidal absolute positional encoding (Vaswani et al. 2017; Omote et al. 2019 §3.1):

    PE(pos, 2i) = sin(pos / 10000^{2i/d_model}),  PE(pos, 2i+1) = cos(pos / 10000^{2i/d_model})

added to the (scaled) token embeddings of the encoder and the decoder. ``none`` adds nothing.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from depnmt.model.schemes.base import ModelDims, Scheme, SchemeModule
from depnmt.model.schemes.registry import register


def sinusoids(pos: Tensor, d_model: int) -> Tensor:
    """The sinusoidal PE above of positions ``pos [...]`` (any integer or float values):
    ``[..., d_model]`` float32, on ``pos``'s device."""
    div = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32, device=pos.device)
                    * (-math.log(10000.0) / d_model))
    angle = pos.to(torch.float32).unsqueeze(-1) * div
    out = angle.new_empty(angle.shape[:-1] + (d_model,))
    out[..., 0::2] = torch.sin(angle)
    out[..., 1::2] = torch.cos(angle)[..., : d_model // 2]
    return out


def sinusoidal_table(max_len: int, d_model: int) -> Tensor:
    """``[max_len, d_model]`` table of the sinusoidal PE above (positions 0 … max_len − 1)."""
    return sinusoids(torch.arange(max_len), d_model)


class SinusoidalPE(SchemeModule):
    """Adds ``PE(pos)`` to the embeddings of both sides, computed from the positions on their
    device (no table whose size would need ``max(pos)`` on the host: no host sync, any
    length; the values are the table's, bit for bit)."""

    def __init__(self, d_model: int):
        super().__init__()
        self.d_model = d_model

    def embed(self, x: Tensor, side: str, positions: Tensor, feats: dict[str, Tensor]) -> Tensor:
        return x + sinusoids(positions, self.d_model).to(x.dtype)


@register
class Absolute(Scheme):
    name = "abs"
    help = "sinusoidal absolute positions (Vaswani et al. 2017)"

    def build(self, dims: ModelDims) -> SchemeModule:
        return SinusoidalPE(dims.d_model)


@register
class NoPositions(Scheme):
    name = "none"
    help = "no positional information at all (a bag of words; for ablations)"

"""int8 decoding on the CPU (``translate --quantize int8``): the model's linear layers with
int8 weights, one scale per output row, and int8 activations quantized per call (dynamic
quantization, what CTranslate2's ``int8`` compute type does on CPUs).

The layers replaced are those decoding calls as modules: the encoder's projections and
feed-forward layers, the decoder's cross-attention, its attention outputs and feed-forward
layers, and the output projection (a copy of the target embedding when they are tied: the
embedding itself stays in floating point). Not replaced: the decoder's self-attention
projections, which a search stacks into one matrix (:meth:`~depnmt.model.attention.
MultiHeadAttention.fused_qkv`), and every scheme's own layers (DBSA's parse head folds its
weights the same way, :meth:`~depnmt.model.schemes.dbsa.ParseHead.step_weights`): those run at
the model's precision. The activations of one call share one scale (fbgemm's dynamic
quantization is per tensor), so a sentence's translation can depend on the sentences batched
with it, which it does not in floating point beyond rounding.

The int8 matrix multiplies are PyTorch's fbgemm/x86 kernels (``torch.ops.quantized``, which
PyTorch marks deprecated in favour of the separate torchao package); they exist on x86 CPUs
only, and their speed-up needs AVX-512 VNNI or AVX2. Shapes as :class:`torch.nn.Linear`:
``[..., in] -> [..., out]``, the output in float32 whatever the input's float dtype.
"""

from __future__ import annotations

import warnings

import torch
from torch import Tensor, nn

from depnmt.core.errors import DepnmtError

class Int8Linear(nn.Module):
    """A linear layer with int8 weights (per output row scales) and dynamically quantized
    int8 activations; inference only."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear
        from torch.ao.quantization import per_channel_dynamic_qconfig
        with warnings.catch_warnings():        # the deprecation of torch.ao.quantization
            warnings.simplefilter("ignore")
            linear.qconfig = per_channel_dynamic_qconfig
            self.inner = DynamicLinear.from_float(linear)
        del linear.qconfig

    def forward(self, x: Tensor) -> Tensor:
        return self.inner(x.float())


def quantizable(name: str) -> bool:
    """Whether the linear layer ``name`` (as ``named_modules`` gives it) is called as a module
    during decoding (see the module docstring)."""
    parts = name.split(".")
    if parts[0] == "schemes":
        return False
    return not (parts[0] == "decoder" and parts[2] == "self_attn"
                and parts[3] in ("q_proj", "k_proj", "v_proj"))


def check_int8(device: torch.device) -> None:
    """A :class:`~depnmt.core.errors.DepnmtError` unless int8 decoding can run on ``device``."""
    if device.type != "cpu":
        raise DepnmtError(f"--quantize int8 decodes on the CPU only (device {device}); on a GPU "
                          f"use --precision auto (bf16/fp16)")
    engines = getattr(torch.backends.quantized, "supported_engines", [])
    if not {"x86", "fbgemm"} & set(engines):
        raise DepnmtError("--quantize int8 needs PyTorch's x86/fbgemm int8 kernels, which this "
                          f"torch build lacks (quantized engines: {', '.join(engines) or 'none'})")


def quantize_int8(model: nn.Module) -> list[str]:
    """Replace ``model``'s :func:`quantizable` linear layers by :class:`Int8Linear` ones, in
    place (the model is for decoding from then on); returns their names."""
    targets = [(name, mod) for name, mod in model.named_modules()
               if isinstance(mod, nn.Linear) and quantizable(name)]
    with torch.no_grad():
        for name, linear in targets:
            parent, _, attr = name.rpartition(".")
            setattr(model.get_submodule(parent) if parent else model, attr, Int8Linear(linear))
    return [name for name, _ in targets]

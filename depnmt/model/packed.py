"""Linear layers with weights packed once for oneDNN, for decoding on the CPU.

``F.linear`` hands oneDNN (bf16) or the BLAS (fp32) the weight in its stored layout at every
call. A search calls every layer once a step with ``n·K`` rows (a few hundred at most), and
there oneDNN's product with the weight packed beforehand into its own layout
(``torch.ops.mkldnn._reorder_linear_weight`` and ``_linear_pointwise``, the kernels
``torch.compile`` emits for frozen CPU models) is mostly faster: on the quickstart model,
0.9–1.3× for bf16 layers (slower only at 4 rows) and 1.2–2.1× for the bf16 output projection
onto the vocabulary, 1.7–3.3× for that projection in fp32, while the BLAS stays as fast or
faster for fp32's smaller layers (:func:`packs`); a whole search 1.03–1.07× (bf16) and
1.14–1.21× (fp32) as fast, with the same translations (docs/performance.md, "Packed
weights"). bf16 products are the same bit for bit; fp32 sums are rounded in another order.

:class:`PackedWeights` is one such map (``[..., in] -> [..., out]``); :class:`PackedLinear`
an ``nn.Linear`` that decodes through it, with the same parameters and state dict.
Where torch lacks these kernels (no oneDNN) or cannot pack a dtype, both fall back to
``F.linear``, as they do everywhere when the environment sets ``DEPNMT_PACKED_WEIGHTS=0``.
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from depnmt.core.device import autocast_dtype
from depnmt.model.derived import Derived

SWITCH = "DEPNMT_PACKED_WEIGHTS"     # 0: F.linear everywhere, 1 (or unset): packed (at import)
SWITCH_VALUE = os.environ.get(SWITCH, "")


def _kernels() -> bool:
    """Whether this torch has oneDNN's packed linear kernels and ``DEPNMT_PACKED_WEIGHTS`` is
    not ``0``."""
    ops = getattr(torch.ops, "mkldnn", None)
    return (SWITCH_VALUE != "0" and torch.backends.mkldnn.is_available()
            and ops is not None and hasattr(ops, "_reorder_linear_weight")
            and hasattr(ops, "_linear_pointwise"))


def check_switch() -> None:
    """A DepnmtError when ``DEPNMT_PACKED_WEIGHTS`` is set to another value than 0 or 1 (a
    misspelt ``off`` or ``false`` would pack as if it were unset); checked when a weight is
    packed, so that importing this module never fails."""
    if SWITCH_VALUE not in ("", "0", "1"):
        from depnmt.core.errors import DepnmtError
        raise DepnmtError(f"{SWITCH}={SWITCH_VALUE}: expected 0 (plain F.linear) or 1 (packed "
                          f"weights, the default)")


KERNELS = _kernels()


FP32_WIDTH = 4      # fp32: packed only for maps more than this many times wider than deep


def packs(dtype: torch.dtype, out_features: int, in_features: int) -> bool:
    """Whether a map ``in -> out`` in ``dtype`` is multiplied with packed weights: every bf16
    one, and fp32 ones more than :data:`FP32_WIDTH` times wider than deep (the output
    projection onto the vocabulary). The BLAS behind fp32 ``F.linear`` is as fast or faster
    for the others at a search's row counts (docs/performance.md, "Packed weights")."""
    return dtype == torch.bfloat16 or (dtype == torch.float32
                                       and out_features > FP32_WIDTH * in_features)


def pack(weight: Tensor) -> Tensor | None:
    """``weight [out, in]`` in oneDNN's packed layout, or None where it is not packed (not a
    CPU tensor, no kernels, not :func:`packs`, or oneDNN refuses the dtype on this CPU); a
    DepnmtError for a ``DEPNMT_PACKED_WEIGHTS`` that is neither 0 nor 1."""
    check_switch()
    if not KERNELS or weight.device.type != "cpu" or not packs(weight.dtype, *weight.shape):
        return None
    try:
        return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), None)
    except RuntimeError:
        return None


class PackedWeights:
    """``x W^T + b`` for weights ``[out, in]`` and bias ``[out]`` (or None) in one dtype, the
    weights packed by :func:`pack` where possible: ``__call__(x [..., in]) -> [..., out]`` in
    that dtype, the input cast to it (as autocast casts a linear layer's input)."""

    def __init__(self, weight: Tensor, bias: Tensor | None):
        self.weight, self.bias = weight, bias
        self.packed = pack(weight)

    def __call__(self, x: Tensor) -> Tensor:
        x = x.to(self.weight.dtype)
        if self.packed is None or x.device.type != "cpu" or (
                torch.is_grad_enabled() and self.weight.requires_grad):   # autograd: F.linear
            return F.linear(x, self.weight, self.bias)
        bias = None if self.bias is None else self.bias.detach()
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, bias, "none", [], "")


def compute_dtype(x: Tensor) -> torch.dtype:
    """The dtype a linear layer multiplies ``x`` in: autocast's where it is on for ``x``'s
    device (and ``x`` is floating point), else ``x``'s own."""
    amp = autocast_dtype(x.device.type) if x.is_floating_point() else None
    return amp or x.dtype


class PackedLinear(nn.Linear):
    """An ``nn.Linear`` (the same parameters, so the same state dict and ties) that multiplies
    by :class:`PackedWeights` without autograd on the CPU: in the dtype autocast gives it (the
    weights cast and packed once per dtype, again only when the parameters change), else as
    ``nn.Linear``."""

    def __init__(self, linear: nn.Linear):
        nn.Module.__init__(self)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight, self.bias = linear.weight, linear.bias
        self._derived = Derived()
        self._fp32 = packs(torch.float32, self.out_features, self.in_features)

    def forward(self, x: Tensor) -> Tensor:
        if KERNELS and x.device.type == "cpu" and not torch.is_grad_enabled():
            dtype = compute_dtype(x)
            if dtype == torch.bfloat16 or (self._fp32 and dtype == torch.float32):
                return self._derived.get(dtype, (self.weight, self.bias), lambda: PackedWeights(
                    self.weight.to(dtype), None if self.bias is None
                    else self.bias.to(dtype)))(x)
        return F.linear(x, self.weight, self.bias)


def pack_linears(model: nn.Module) -> list[str]:
    """Replace every ``nn.Linear`` of ``model`` (not its subclasses, e.g. int8 layers) by a
    :class:`PackedLinear` with the same parameters, in place; returns their names."""
    targets = [(name, mod) for name, mod in model.named_modules() if type(mod) is nn.Linear]
    for name, linear in targets:
        parent, _, attr = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, attr, PackedLinear(linear))
    return [name for name, _ in targets]

"""Linear layers with weights packed for oneDNN (:mod:`depnmt.model.packed`): the same
parameters and state dict, the values of ``nn.Linear`` (to fp32 rounding; bf16 bit for bit),
autograd and non-CPU inputs left to ``F.linear``, packed weights rebuilt when the parameters
change, and the same beam search as the unpacked model."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from torch import nn

import depnmt.model.packed as packed
from depnmt.decoding.search import SearchConfig, beam_search
from depnmt.model.packed import PackedLinear, PackedWeights, pack_linears
from depnmt.model.transformer import TransformerNMT
from tests.tiny_models import padded_source, scheme_model

pytestmark = pytest.mark.skipif(not packed.KERNELS, reason="this torch has no oneDNN kernels")


def model() -> TransformerNMT:
    """A vocabulary of 160 (> 4 × d_model 32): the output projection is packed in fp32 too."""
    return scheme_model(tgt_vocab=160)


def source() -> torch.Tensor:
    return padded_source(5, 8, torch.Generator().manual_seed(3))


def test_every_linear_is_packed_with_the_same_parameters_and_state_dict():
    plain, m = model(), model()
    names = pack_linears(m)
    assert {"output", "encoder.0.self_attn.q_proj", "decoder.1.ffn.3"} <= set(names)
    assert any(n.startswith("schemes.") for n in names)           # DBSA's parse head too
    assert all(type(m.get_submodule(n)) is PackedLinear for n in names)
    assert not [n for n, mod in m.named_modules() if type(mod) is nn.Linear]
    assert m.output.weight is m.tgt_embed.weight                    # the tie kept
    want, got = plain.state_dict(), m.state_dict()
    assert list(got) == list(want) and all(torch.equal(got[k], want[k]) for k in want)
    assert pack_linears(m) == []                                    # packed once


def test_bf16_maps_are_packed_and_fp32_ones_only_when_much_wider_than_deep():
    assert packed.packs(torch.bfloat16, 32, 32) and packed.packs(torch.float32, 160, 32)
    assert not packed.packs(torch.float32, 128, 32) and not packed.packs(torch.float16, 160, 32)
    assert PackedWeights(torch.randn(160, 32), None).packed is not None
    assert PackedWeights(torch.randn(96, 32), None).packed is None


@pytest.mark.parametrize("amp, width", [(None, 200), (None, 56), (torch.bfloat16, 56)])
def test_a_packed_layer_computes_what_nn_linear_does(amp, width):
    torch.manual_seed(1)
    linear = nn.Linear(24, width)
    layer = PackedLinear(linear)
    x = torch.randn(7, 3, 24)
    with torch.no_grad(), torch.autocast("cpu", torch.bfloat16, enabled=amp is not None):
        want, got = linear(x), layer(x)
    assert got.dtype == want.dtype == (amp or torch.float32) and got.shape == (7, 3, width)
    if amp is None:
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    else:
        assert torch.equal(got, want)


def test_autograd_and_changed_weights_are_served_as_nn_linear_serves_them():
    torch.manual_seed(2)
    layer = PackedLinear(nn.Linear(8, 40))                            # packed in fp32
    x = torch.randn(5, 8)
    layer(x).sum().backward()                                        # grad on: F.linear
    assert layer.weight.grad is not None and layer.weight.grad.abs().sum() > 0
    with torch.no_grad():
        before = layer(x)
        layer.weight.mul_(2.0)                                       # in place: repacked
        after = layer(x)
    torch.testing.assert_close(after - layer.bias, 2 * (before - layer.bias), rtol=1e-5,
                               atol=1e-5)


def test_weights_that_cannot_be_packed_fall_back_to_f_linear(monkeypatch):
    w, b = torch.randn(6, 4, dtype=torch.float64), torch.randn(6, dtype=torch.float64)
    weights = PackedWeights(w, b)
    x = torch.randn(3, 4, dtype=torch.float64)
    assert weights.packed is None and torch.equal(weights(x), torch.nn.functional.linear(x, w, b))
    monkeypatch.setattr(packed, "KERNELS", False)
    assert PackedWeights(w.float(), b.float()).packed is None


@pytest.mark.parametrize("amp", [None, torch.bfloat16])
def test_a_packed_model_searches_like_the_unpacked_one(amp):
    """Beam search over abs+rel+dbsa_dec (packed: every module, the decoder's fused
    self-attention projections and DBSA's folded step weights)."""
    plain, m = model(), model()
    pack_linears(m)
    cfg = SearchConfig(beam=3, max_len_a=1.0, max_len_b=4)
    with torch.no_grad(), torch.autocast("cpu", torch.bfloat16, enabled=amp is not None):
        want, got = (beam_search(net, source(), {}, cfg) for net in (plain, m))
    assert got == want and any(got)


def test_the_environment_can_switch_packing_off():
    """``DEPNMT_PACKED_WEIGHTS=0``: F.linear everywhere (what bench/packed.py compares with)."""
    code = "import depnmt.model.packed as p; print(p.KERNELS)"
    for value, want in (("0", "False"), ("1", "True")):
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env={**os.environ, "DEPNMT_PACKED_WEIGHTS": value})
        assert done.stdout.strip() == want, done.stderr

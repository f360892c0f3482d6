"""``translate --quantize int8`` (:mod:`depnmt.model.quantize`): which layers become int8, that
the int8 model computes nearly the float model's logits and searches like it at either
precision, and the clear errors where int8 cannot run."""

from __future__ import annotations

import pytest
import torch

from depnmt.core.errors import DepnmtError
from depnmt.decoding.search import SearchConfig, beam_search
from depnmt.model.quantize import Int8Linear, check_int8, quantizable, quantize_int8
from depnmt.model.transformer import TransformerNMT
from tests.tiny_models import padded_source, scheme_model

pytestmark = pytest.mark.skipif(
    not {"x86", "fbgemm"} & set(torch.backends.quantized.supported_engines),
    reason="this torch build has no x86/fbgemm int8 kernels")


def model(scheme: str = "abs+rel+dbsa_dec") -> TransformerNMT:
    return scheme_model(scheme)


def source() -> torch.Tensor:
    return padded_source()


def test_the_layers_decoding_calls_as_modules_become_int8():
    m = model()
    names = set(quantize_int8(m))
    assert {"output", "encoder.0.self_attn.q_proj", "encoder.1.ffn.3", "decoder.0.ffn.0",
            "decoder.1.cross_attn.k_proj", "decoder.1.self_attn.out_proj"} <= names
    # a search stacks the decoder's self-attention projections; schemes fold their own
    assert not {n for n in names if n.startswith("schemes.") or ".self_attn.q_proj" in n
                and n.startswith("decoder.")}
    assert all(isinstance(m.get_submodule(n), Int8Linear) for n in names)
    assert not quantizable("decoder.0.self_attn.v_proj") and quantizable("decoder.0.ffn.3")
    assert isinstance(m.tgt_embed.weight, torch.nn.Parameter)          # still float


@pytest.mark.parametrize("autocast", [False, True])
def test_int8_logits_are_close_to_the_float_models(autocast):
    m, q = model(), model()
    quantize_int8(q)
    src, tgt = source(), torch.randint(4, 50, (3, 5))
    with torch.no_grad(), torch.autocast("cpu", torch.bfloat16, enabled=autocast):
        want, got = (net.decode(tgt, net.start_state(*net.encode(src, {}))).float()
                     for net in (m, q))
    assert got.dtype == torch.float32 and torch.isfinite(got).all()
    assert (got - want).abs().max() < 0.1 * want.abs().max()
    assert not torch.equal(got, want)                                  # int8 arithmetic
    with torch.autocast("cpu", torch.bfloat16, enabled=autocast):      # beam search runs
        hyps = beam_search(q, src, {}, SearchConfig(beam=3, max_len_a=0, max_len_b=6))
    assert len(hyps) == 3


def test_int8_runs_on_the_cpu_only(monkeypatch):
    check_int8(torch.device("cpu"))
    with pytest.raises(DepnmtError, match="CPU only"):
        check_int8(torch.device("cuda", 0))
    monkeypatch.setattr(torch.backends, "quantized",
                        type("Engines", (), {"supported_engines": ["qnnpack"]})())
    with pytest.raises(DepnmtError, match="lacks .quantized engines: qnnpack"):
        check_int8(torch.device("cpu"))

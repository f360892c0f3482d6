"""Beam search keeps its finished hypotheses on the device: the host reads a few values per
step (one on CUDA is a synchronisation), not a few per finished hypothesis, and the output is
the one the per-hypothesis bookkeeping gave."""

from __future__ import annotations

import pytest
import torch

from depnmt.core.vocab import EOS, PAD
from depnmt.decoding.search import SearchConfig, beam_search, greedy_search
from depnmt.model.schemes.registry import scheme_entries
from depnmt.model.transformer import ModelConfig, TransformerNMT


def model_and_sources(seed: int, b: int = 8, s: int = 10, vocab: int = 24):
    """A tiny abs model with an untied random output layer (hypotheses end at varied steps,
    some before their limit, with varied tokens) and ``b`` sources of lengths 2..``s`` with
    padding."""
    torch.manual_seed(seed)
    cfg = ModelConfig(vocab, vocab, d_model=32, n_heads=4, d_ff=64, encoder_layers=1,
                      decoder_layers=2, dropout=0.0, schemes=scheme_entries(["abs"], {}))
    model = TransformerNMT(cfg).eval()
    g = torch.Generator().manual_seed(seed)
    model.output.weight = torch.nn.Parameter(torch.randn(vocab, 32, generator=g) * 0.3)
    src = torch.randint(4, vocab, (b, s), generator=g)
    lengths = torch.randint(2, s + 1, (b,), generator=g)
    for i in range(b):
        src[i, lengths[i] - 1] = EOS
        src[i, lengths[i]:] = PAD
    return model, src


CONFIGS = [SearchConfig(beam=4, alpha=0.6, max_len_a=1.5, max_len_b=2),
           SearchConfig(beam=4, alpha=0.6, max_len_a=1.5, max_len_b=2, at_limit="cut"),
           SearchConfig(beam=4, alpha=0.0, max_len_a=1.0, max_len_b=1),
           SearchConfig(beam=5, alpha=1.0, max_len_a=0.5, max_len_b=4, at_limit="cut")]

# Written by the beam search before it kept finished hypotheses on the device (one host read
# per finished hypothesis and value): what the new bookkeeping must give, token for token.
EXPECTED = {
    (1, 0): [[], [23, 23, 23], [11, 11, 17, 11, 11, 11, 11, 11, 17], [], [20, 8], [11, 7], [11],
             [23, 23, 23, 23, 23, 23, 23, 23, 7]],
    (1, 1): [[], [23, 23, 23], [11, 11, 17, 11, 11, 11, 11, 11, 17], [], [20, 8], [11, 7], [11],
             [23, 23, 23, 23, 23, 23, 23, 23, 23]],
    (1, 2): [[], [20], [11, 11, 11, 11, 17], [], [20, 8], [11, 7], [11], [23, 23, 23, 7, 8]],
    (1, 3): [[], [23, 23, 23, 23], [11, 17, 11, 11, 11, 11], [], [20, 8], [7], [11],
             [23, 23, 23, 23, 23, 23]],
    (7, 0): [[16, 4, 4, 4, 16, 4, 16, 16, 4, 16, 16, 16, 16, 16, 16],
             [4, 16, 16, 16, 16, 16, 16, 16, 16], [16, 4, 4, 4, 4, 4, 16, 4, 16, 4, 16, 4],
             [4, 16, 4, 16], [4, 4, 4, 16, 4, 16, 4, 16, 16, 16, 16, 16, 16, 16, 4], [],
             [16, 4, 4, 4, 4, 16, 4, 16, 4, 16], []],
    (7, 1): [[16, 4, 4, 4, 16, 4, 16, 16, 4, 16, 16, 16, 16, 16, 4],
             [4, 16, 16, 16, 16, 16, 16, 16, 16], [16, 4, 4, 4, 4, 4, 16, 4, 16, 4, 16, 4],
             [4, 16, 4, 16], [4, 4, 4, 16, 4, 16, 4, 16, 16, 16, 16, 16, 16, 16, 4], [],
             [16, 4, 4, 4, 16, 4, 16, 4, 16, 4], []],
    (7, 2): [[16, 4, 4, 4, 16, 16, 16, 16, 4], [4, 16, 16, 16, 16], [16, 4, 4, 4, 16, 4, 4],
             [16, 4], [4, 4, 4, 16, 4, 16, 16, 16, 4], [], [16, 4, 4, 4, 16, 4], []],
    (7, 3): [[], [16, 4, 4, 16, 16, 16], [16, 4, 4, 4, 16, 4, 4], [], [4, 4, 4, 16, 4, 16, 16, 4],
             [], [16, 4, 4, 4, 16, 4], []],
}

HOST_READS = ("item", "tolist", "__int__", "__float__", "__bool__", "__index__", "nonzero",
              "cpu", "numpy")


@pytest.fixture
def host_reads(monkeypatch) -> list[str]:
    """The names of the tensor methods that copied device values to the host, one per call
    (``nonzero`` included: its output size needs one)."""
    calls: list[str] = []

    def counted(name):
        original = getattr(torch.Tensor, name)

        def read(self, *args, **kwargs):
            calls.append(name)
            return original(self, *args, **kwargs)
        return read
    for name in HOST_READS:
        monkeypatch.setattr(torch.Tensor, name, counted(name))
    return calls


def counting_steps(model) -> list[int]:
    """Counts the model's decoder calls (one per search step) in the returned list."""
    steps: list[int] = []
    decode = model.decode

    def counted(*args, **kwargs):
        steps.append(1)
        return decode(*args, **kwargs)
    model.decode = counted
    return steps


@pytest.mark.parametrize("seed", [1, 7])
@pytest.mark.parametrize("config", range(len(CONFIGS)))
def test_beam_output_is_that_of_the_per_hypothesis_bookkeeping(seed, config):
    model, src = model_and_sources(seed)
    assert beam_search(model, src, {}, CONFIGS[config]) == EXPECTED[(seed, config)]


@pytest.mark.parametrize("config", range(len(CONFIGS)))
def test_beam_reads_the_host_once_a_step(config, host_reads):
    model, src = model_and_sources(7)
    steps = counting_steps(model)
    host_reads.clear()                                   # those of building the model
    out = beam_search(model, src, {}, CONFIGS[config])
    assert out == EXPECTED[(7, config)]
    finished = CONFIGS[config].beam * src.shape[0]       # at least beam per sentence
    assert len(steps) >= 5 and finished >= 32
    # one read a step (which sentences go on), the limits at the start, the output at the end
    assert len(host_reads) <= len(steps) + 2, (len(steps), sorted(host_reads))


def test_greedy_reads_the_host_once_a_step(host_reads):
    model, src = model_and_sources(7)
    steps = counting_steps(model)
    host_reads.clear()
    out = greedy_search(model, src, {}, SearchConfig(beam=1))
    assert len(out) == src.shape[0] and len(steps) >= 5
    assert len(host_reads) <= len(steps) + 2, (len(steps), sorted(host_reads))


FACTORIES = {torch.full, torch.zeros, torch.ones, torch.empty, torch.arange, torch.tensor,
             torch.as_tensor, torch.eye}


class DevicelessFactories(torch.overrides.TorchFunctionMode):
    """Records every tensor factory called without ``device=`` (such a tensor is on the CPU
    whatever the device of the search, and meets CUDA tensors there)."""

    def __init__(self):
        super().__init__()
        self.calls: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in FACTORIES and "device" not in kwargs:
            self.calls.append(func.__name__)
        return func(*args, **kwargs)


@pytest.mark.parametrize("schemes", [["abs"], ["rel"], ["abs", "rel"]])
def test_search_creates_its_tensors_on_the_source_device(schemes):
    torch.manual_seed(0)
    cfg = ModelConfig(24, 24, d_model=32, n_heads=4, d_ff=64, encoder_layers=1,
                      decoder_layers=2, dropout=0.0, schemes=scheme_entries(schemes, {}))
    model = TransformerNMT(cfg).eval()
    _, src = model_and_sources(7)
    with DevicelessFactories() as mode:
        beam_search(model, src, {}, CONFIGS[1])
        greedy_search(model, src, {}, SearchConfig(beam=1))
    assert mode.calls == []


def test_search_attention_leaves_out_cudnn_on_cuda_only():
    from depnmt.core.device import search_attention
    flags = torch.backends.cuda
    enabled = lambda: (flags.cudnn_sdp_enabled(), flags.flash_sdp_enabled(),  # noqa: E731
                       flags.mem_efficient_sdp_enabled(), flags.math_sdp_enabled())
    before = enabled()
    with search_attention(torch.device("cpu")):
        assert enabled() == before
    with search_attention(torch.device("cuda", 0)):     # only flags: no GPU needed
        assert enabled() == (False, True, True, True)
    assert enabled() == before

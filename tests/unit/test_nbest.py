"""N-best lists from the search: the first entry is the 1-best output, the scores are the
length-normalised log-probabilities that rank the beam's finished hypotheses, and an
exhaustive beam returns the true n best."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from depnmt.core.errors import DepnmtError
from depnmt.core.vocab import BOS, EOS, PAD
from depnmt.decoding.search import (SearchConfig, beam_nbest, beam_search, greedy_nbest,
                                    greedy_search, length_penalty, search_nbest)
from depnmt.model.schemes.registry import scheme_entries
from depnmt.model.transformer import ModelConfig, TransformerNMT


def tiny_model(seed: int, vocab: int = 24, decoder_layers: int = 2) -> TransformerNMT:
    """An abs model with a random untied output layer (hypotheses end at varied steps)."""
    torch.manual_seed(seed)
    cfg = ModelConfig(vocab, vocab, d_model=32, n_heads=4, d_ff=64, encoder_layers=1,
                      decoder_layers=decoder_layers, dropout=0.0,
                      schemes=scheme_entries(["abs"], {}))
    model = TransformerNMT(cfg).eval()
    g = torch.Generator().manual_seed(seed)
    model.output.weight = torch.nn.Parameter(torch.randn(vocab, 32, generator=g) * 0.3)
    return model


def sources(seed: int, b: int = 6, s: int = 8, vocab: int = 24) -> torch.Tensor:
    """``[b, s]`` sources of lengths 2..s (EOS, then PAD)."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, vocab, (b, s), generator=g)
    for i, n in enumerate(torch.randint(2, s + 1, (b,), generator=g).tolist()):
        src[i, n - 1] = EOS
        src[i, n:] = PAD
    return src


def logprob(model: TransformerNMT, src: torch.Tensor, hyp: list[int], eos: bool = True) -> float:
    """log p(hyp [+ EOS] | src) by one teacher-forced pass (``src [1, S]``)."""
    out = hyp + [EOS] if eos else hyp
    with torch.no_grad():
        logits = model(src, torch.tensor([[BOS] + out[:-1]]), {})[0]
    return float(torch.log_softmax(logits[0].float(), -1)[torch.arange(len(out)), out].sum())


def one(src: torch.Tensor, i: int) -> torch.Tensor:
    """Sentence ``i`` of ``src`` alone, without padding: ``[1, S_i]``."""
    return src[i:i + 1, :int((src[i] != PAD).sum())]


CONFIGS = [SearchConfig(beam=4, alpha=0.6, max_len_a=1.5, max_len_b=2),
           SearchConfig(beam=4, alpha=0.6, max_len_a=1.5, max_len_b=2, at_limit="cut"),
           SearchConfig(beam=5, alpha=1.0, max_len_a=0.5, max_len_b=4)]


@pytest.mark.parametrize("config", range(len(CONFIGS)))
@pytest.mark.parametrize("nbest", [1, 3])
def test_first_entry_is_the_one_best_and_scores_rank_the_list(config, nbest):
    cfg = CONFIGS[config]
    model, src = tiny_model(1), sources(1)
    lists = beam_nbest(model, src, {}, cfg, nbest)
    assert [hyps[0].tokens for hyps in lists] == beam_search(model, src, {}, cfg)
    assert all(len(hyps) == nbest for hyps in lists)
    for hyps in lists:
        scores = [h.score for h in hyps]
        assert scores == sorted(scores, reverse=True) and all(map(math.isfinite, scores))
        assert len({tuple(h.tokens) for h in hyps}) == len(hyps)      # distinct hypotheses


@pytest.mark.parametrize("config", [0, 1])
def test_scores_are_the_length_normalised_log_probability(config):
    """``logprob`` is the model's log-probability of the hypothesis (with its EOS, or without
    for one cut at the limit), ``score`` = logprob / lp(|Y|)."""
    cfg = CONFIGS[config]
    model, src = tiny_model(7), sources(7)
    limits = [math.ceil((int((row != PAD).sum()) - 1) * cfg.max_len_a + cfg.max_len_b)
              for row in src]
    for i, hyps in enumerate(beam_nbest(model, src, {}, cfg, 4)):
        for h in hyps:
            cut = cfg.at_limit == "cut" and len(h.tokens) == limits[i] - 1
            assert h.logprob == pytest.approx(logprob(model, one(src, i), h.tokens, not cut),
                                              abs=1e-4)
            scored = len(h.tokens) + (0 if cut else 1)
            assert h.score == pytest.approx(h.logprob / length_penalty(scored, cfg.alpha))


def test_an_exhaustive_beam_returns_the_true_n_best():
    """A beam wider than every prefix set sees every hypothesis: its n-best list is the n most
    probable complete hypotheses (alpha 0), in order. Tokens UNK, 4, 5 (PAD and BOS banned)."""
    torch.manual_seed(0)
    cfg = ModelConfig(8, 6, d_model=16, n_heads=2, d_ff=32, encoder_layers=1, decoder_layers=1,
                      dropout=0.0)
    model = TransformerNMT(cfg).eval()
    src = torch.tensor([[5, 6, EOS]])
    limit = 3
    every = {h: logprob(model, src, list(h)) for n in range(limit)
             for h in itertools.product([1, 4, 5], repeat=n)}
    truth = sorted(every.items(), key=lambda kv: -kv[1])[:6]
    found = beam_nbest(model, src, {}, SearchConfig(beam=16, alpha=0.0, max_len_a=0.0,
                                                    max_len_b=limit), 6)[0]
    assert [tuple(h.tokens) for h in found] == [h for h, _ in truth]
    assert [h.logprob for h in found] == pytest.approx([lp for _, lp in truth], abs=1e-5)


@pytest.mark.parametrize("at_limit", ["eos", "cut"])
def test_greedy_nbest_is_greedy_with_its_score(at_limit):
    cfg = SearchConfig(beam=1, alpha=0.6, max_len_a=1.0, max_len_b=2, at_limit=at_limit)
    model, src = tiny_model(1), sources(1)
    lists = search_nbest(model, src, {}, cfg, 1)
    assert [hyps[0].tokens for hyps in lists] == greedy_search(model, src, {}, cfg)
    limits = [math.ceil((int((row != PAD).sum()) - 1) * cfg.max_len_a + cfg.max_len_b)
              for row in src]
    for i, [h] in enumerate(lists):
        cut = at_limit == "cut" and len(h.tokens) == limits[i] - 1
        assert h.logprob == pytest.approx(logprob(model, one(src, i), h.tokens, not cut),
                                          abs=1e-4)
        assert h.score == pytest.approx(
            h.logprob / length_penalty(len(h.tokens) + (not cut), cfg.alpha))
    assert search_nbest(model, src, {}, cfg, 1) == greedy_nbest(model, src, {}, cfg)


def test_nbest_beyond_the_beam_is_refused():
    model, src = tiny_model(1), sources(1, b=1)
    with pytest.raises(DepnmtError, match="nbest 5 is more than the beam \\(4\\)"):
        search_nbest(model, src, {}, SearchConfig(beam=4), 5)
    with pytest.raises(DepnmtError, match="nbest 2 is more than the beam \\(1\\)"):
        search_nbest(model, src, {}, SearchConfig(beam=1), 2)
    with pytest.raises(DepnmtError, match="at least 1"):
        search_nbest(model, src, {}, SearchConfig(beam=4), 0)


def test_a_one_token_limit_leaves_only_the_empty_hypothesis():
    """With room for EOS only there is one hypothesis, whatever n: the list is shorter."""
    model, src = tiny_model(1), sources(1, b=2)
    lists = beam_nbest(model, src, {}, SearchConfig(beam=3, max_len_a=0.0, max_len_b=1), 3)
    assert [[h.tokens for h in hyps] for hyps in lists] == [[[]], [[]]]
    assert lists[0][0].logprob == pytest.approx(logprob(model, one(src, 0), []), abs=1e-4)


HOST_READS = ("item", "tolist", "__int__", "__float__", "__bool__", "__index__", "nonzero",
              "cpu", "numpy")


def test_nbest_reads_the_host_once_a_step(monkeypatch):
    """Keeping n finished hypotheses stays on the device: one read a step, the limits at the
    start, tokens and scores at the end."""
    model, src = tiny_model(7), sources(7)
    steps: list[int] = []
    decode = model.decode
    monkeypatch.setattr(model, "decode", lambda *a, **k: steps.append(1) or decode(*a, **k))
    reads: list[str] = []
    for name in HOST_READS:
        original = getattr(torch.Tensor, name)
        monkeypatch.setattr(torch.Tensor, name,
                            lambda self, *a, _o=original, _n=name, **k:
                            reads.append(_n) or _o(self, *a, **k))
    beam_nbest(model, src, {}, CONFIGS[0], 3)
    assert len(steps) >= 5
    assert len(reads) <= len(steps) + 3, (len(steps), sorted(reads))

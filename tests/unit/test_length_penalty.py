"""The two length penalties of the search: ``gnmt`` ((5 + |Y|) / 6)^alpha and ``power``
|Y|^alpha (CTranslate2's, fairseq's). On a scripted model with two complete hypotheses, a short
A and a long B, GNMT ranks A first and the power form B: every path of the search (beam, its
n-best list, greedy's score) divides by the form the config names."""

from __future__ import annotations

import math

import pytest
import torch

from depnmt.core.errors import DepnmtError
from depnmt.core.vocab import BOS, EOS
from depnmt.decoding.search import (LENGTH_PENALTIES, SearchConfig, beam_nbest, beam_search,
                                    greedy_nbest, length_penalty)

V = 32
A_TOK, B_TOK, C_TOK, D_TOK, E_TOK = 4, 5, 6, 7, 8
SHORT = [A_TOK]                          # A: a EOS, |Y| = 2
LONG = [B_TOK, C_TOK, D_TOK, E_TOK]      # B: b c d e EOS, |Y| = 5
# next-token probabilities after each scripted token (the rest of each row is spread evenly
# over the other ordinary tokens; after any other token the next one is uniform)
SCRIPT = {BOS: {A_TOK: 0.5, B_TOK: 0.49}, A_TOK: {EOS: 0.05}, B_TOK: {C_TOK: 0.25},
          C_TOK: {D_TOK: 0.25}, D_TOK: {E_TOK: 0.25}, E_TOK: {EOS: 0.3}}


def row(spec: dict[int, float]) -> torch.Tensor:
    """log-probabilities ``[V]``: ``spec``'s, the remaining mass spread over the ordinary
    tokens (4..V-1) ``spec`` leaves out, a tiny amount on the specials."""
    probs = torch.full((V,), 1e-9)
    others = [t for t in range(4, V) if t not in spec]
    probs[others] = (1.0 - sum(spec.values())) / len(others)
    for token, p in spec.items():
        probs[token] = p
    return probs.log()


class _State:
    """A decoder state with nothing to reorder."""

    def reorder(self, index: torch.Tensor) -> None:
        pass

    def reorder_targets(self, index: torch.Tensor) -> None:
        pass


class Bigram:
    """A stand-in for TransformerNMT whose next token depends on the last one only (:data:
    `SCRIPT`), whatever the source."""

    def __init__(self):
        self.table = torch.stack([row(SCRIPT.get(t, {})) for t in range(V)])    # [V, V]

    def search_state(self, src, src_feats, extras=None):
        return _State()

    def decode(self, last: torch.Tensor, state, incremental: bool) -> torch.Tensor:
        """logits ``[n, 1, V]`` after the last tokens of ``last [n, t]``."""
        return self.table[last[:, -1]][:, None, :]


def logprob(tokens: list[int]) -> float:
    """log p(tokens EOS) under :class:`Bigram`."""
    table, prev, total = Bigram().table, BOS, 0.0
    for token in tokens + [EOS]:
        total += float(table[prev, token])
        prev = token
    return total


SRC = torch.tensor([[9, 10, EOS]])


def config(form: str, **kw) -> SearchConfig:
    return SearchConfig(**{"beam": 4, "alpha": 1.0, "max_len_a": 0.0, "max_len_b": 10,
                           "length_penalty": form, **kw})


def test_the_forms_are_the_formulas():
    assert length_penalty(5, 1.0, "gnmt") == pytest.approx(10 / 6)
    assert length_penalty(5, 0.6, "power") == pytest.approx(5 ** 0.6)
    assert length_penalty(0, 0.6, "power") == 1.0            # an empty hypothesis: not divided
    assert length_penalty(7, 0.6) == length_penalty(7, 0.6, "gnmt")     # gnmt by default


def test_the_forms_rank_the_pair_differently():
    a, b = logprob(SHORT), logprob(LONG)
    assert a > b                                                # A is the more probable
    assert a / length_penalty(2, 1.0, "gnmt") > b / length_penalty(5, 1.0, "gnmt")
    assert a / length_penalty(2, 1.0, "power") < b / length_penalty(5, 1.0, "power")


@pytest.mark.parametrize("at_limit", ["eos", "cut"])
@pytest.mark.parametrize("form, best", [("gnmt", SHORT), ("power", LONG)])
def test_beam_search_ranks_by_the_configured_form(form, best, at_limit):
    cfg = config(form, at_limit=at_limit)
    assert beam_search(Bigram(), SRC, {}, cfg) == [best]
    hyps = beam_nbest(Bigram(), SRC, {}, cfg, 2)[0]
    assert [h.tokens for h in hyps] == [best, LONG if best == SHORT else SHORT]
    for h in hyps:
        assert h.logprob == pytest.approx(logprob(h.tokens), abs=1e-5)
        assert h.score == pytest.approx(h.logprob / length_penalty(len(h.tokens) + 1, 1.0, form))


def test_alpha_zero_ranks_alike():
    """Both forms are 1 for alpha = 0: plain log-probability picks A."""
    for form in LENGTH_PENALTIES:
        assert beam_search(Bigram(), SRC, {}, config(form, alpha=0.0)) == [SHORT]


@pytest.mark.parametrize("form", LENGTH_PENALTIES)
def test_greedy_scores_with_the_configured_form(form):
    [[h]] = greedy_nbest(Bigram(), SRC, {}, config(form, beam=1, alpha=0.6))
    assert h.tokens == SHORT
    assert h.score == pytest.approx(logprob(SHORT) / length_penalty(2, 0.6, form))
    assert math.isfinite(h.score)


def test_an_unknown_form_is_refused():
    with pytest.raises(DepnmtError, match="length_penalty 'wu': expected one of gnmt, power"):
        SearchConfig(length_penalty="wu")


def test_translate_offers_the_search_forms():
    from depnmt.commands.translate import command
    [option] = [p for p in command.params if p.name == "length_penalty"]
    assert tuple(option.type.choices) == LENGTH_PENALTIES

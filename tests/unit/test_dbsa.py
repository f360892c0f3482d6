"""DBSA (Deguchi et al. 2019): the bi-affine parse head against Eqs. 14–17 written out, masking,
gradients, causality and incremental decoding of the decoder head, supervision with the chain
rule, UAS, tree repair (Chu–Liu/Edmonds) and the λ = 0 objective of the training loop."""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest
import torch

from depnmt.core.conllu import tree_problem
from depnmt.core.errors import DepnmtError
from depnmt.core.trees import max_spanning_tree, random_heads
from depnmt.core.vocab import EOS, PAD
from depnmt.data.batches import Example, add_features, collate
from depnmt.decoding.search import SearchConfig, beam_search
from depnmt.model.attention import (AttentionTerms, HeadOverride, HeadResult, KeyValues,
                                    MultiHeadAttention, reference_attention)
from depnmt.model.schemes import Extras
from depnmt.model.schemes.dbsa import (PARSE_HEAD, ParseHead, ParseKeys, induced_tree,
                                       parse_targets, uas_counts)
from depnmt.model.schemes.names import resolve
from depnmt.model.schemes.registry import build_schemes, scheme_entries
from depnmt.model.transformer import ModelConfig, TransformerNMT, label_smoothed_nll
from depnmt.stages.parse import Sentence


def model(scheme="abs+dbsa_enc+dbsa_dec", seed=0, layers=2, **options) -> TransformerNMT:
    torch.manual_seed(seed)
    options = {"dbsa_enc_layer": 2, "dbsa_dec_layer": 2, **options}
    cfg = ModelConfig(40, 50, d_model=32, n_heads=4, d_ff=64, encoder_layers=layers,
                      decoder_layers=layers, dropout=0.0,
                      schemes=scheme_entries(resolve(scheme), options))
    return TransformerNMT(cfg).eval()


def parts(m: TransformerNMT) -> dict:
    return {p.side: p for p in m.schemes.parts if hasattr(p, "side")}


def bpe_words(n: int, rng: random.Random) -> list[str]:
    """Subwords of ``n`` words, some split into 2–3 pieces."""
    out = []
    for w in range(n):
        pieces = rng.choice([1, 1, 2, 3])
        out += [f"w{w}p{k}@@" for k in range(pieces - 1)] + [f"w{w}end"]
    return out


def random_example(index: int, rng: random.Random, n_src=5, n_tgt=6) -> Example:
    src_sub, tgt_sub = bpe_words(n_src, rng), bpe_words(n_tgt, rng)
    ex = Example(index, [rng.randrange(4, 40) for _ in src_sub] + [EOS],
                 [rng.randrange(4, 50) for _ in tgt_sub], src_sub, tgt_subwords=tgt_sub)
    for side, n in (("src", n_src), ("tgt", n_tgt)):
        heads = random_heads(n, rng)
        setattr(ex, f"{side}_tree", Sentence([f"w{w}" for w in range(n)], heads, ["dep"] * n))
    return ex


def batch_of(m: TransformerNMT, n=3, seed=0):
    rng = random.Random(seed)
    exs = [random_example(i, rng, n_src=rng.randint(2, 6), n_tgt=rng.randint(2, 7))
           for i in range(n)]
    add_features(exs, m.schemes.schemes)
    return exs, collate(exs)


# -- the bi-affine head -----------------------------------------------------------------------

def test_biaffine_scores_equal_eq14_and_mask_padding():
    torch.manual_seed(0)
    head = ParseHead(16, 8)
    with torch.no_grad():
        head.u.normal_()
    q, k = torch.randn(2, 5, 8), torch.randn(2, 5, 8)
    lengths = torch.tensor([5, 3])
    mask = (torch.arange(5)[None, :] < lengths[:, None])[:, None, None, :]   # [B, 1, 1, S]
    logp = head.log_probs(q, k, mask)
    assert logp.shape == (2, 5, 5)
    # Eq. 14 with the key-side bias (the plugin's form): s_tq = q_t U1 k_q / sqrt(d) + k_q u
    literal = torch.einsum("btd,de,bqe->btq", q / math.sqrt(8), head.u1, k) \
        + torch.einsum("bqd,d->bq", k, head.u)[:, None, :]
    literal = literal.masked_fill(~mask[:, 0], float("-inf")).softmax(-1)
    assert torch.allclose(logp.exp(), literal, atol=1e-6)
    assert torch.allclose(logp.exp().sum(-1), torch.ones(2, 5), atol=1e-6)
    assert (logp[1, :, 3:].exp() == 0).all()                    # padding is never a head


def test_deep_scorer_is_lisas_deep_biaffine():
    """LISA as the PASCAL fork computes it (multihead_lisa.py): leaky ReLU on the projections,
    [q; 1] W k^T with W's last row the key bias, no 1/sqrt(d_k) — written out literally."""
    torch.manual_seed(0)
    head = ParseHead(16, 8, deep=True)
    with torch.no_grad():
        head.u.normal_()
    q, k = torch.randn(2, 5, 8), torch.randn(2, 5, 8)
    w = torch.cat([head.u1, head.u[None, :]])                          # (d_k + 1, d_k)
    ones = torch.ones(2, 5, 1)
    q_lisa = torch.cat([torch.nn.functional.leaky_relu(q), ones], dim=-1)
    literal = (q_lisa @ w @ torch.nn.functional.leaky_relu(k).transpose(1, 2)).softmax(-1)
    assert torch.allclose(head.log_probs(q, k, None).exp(), literal, atol=1e-6)
    plain = ParseHead(16, 8)
    plain.load_state_dict(head.state_dict())
    assert not torch.allclose(plain.log_probs(q, k, None), head.log_probs(q, k, None))


def test_several_parse_heads_are_the_plugins_dependency_heads():
    """--dbsa-heads 2 (dbsa/modules/dbsa.py, dependency_heads): one U1 over both heads' queries,
    the key bias on both, a softmax per head, A_parse = their mean; head h's output uses its own
    slice of V."""
    from depnmt.model.schemes.base import ModelDims
    from depnmt.model.schemes.dbsa import DBSAModule
    torch.manual_seed(0)
    d_k, n = 4, 2
    head = ParseHead(16, d_k, n_heads=n)
    with torch.no_grad():
        head.u.normal_()
    q, k = torch.randn(2, 5, n * d_k), torch.randn(2, 5, n * d_k)
    qw = (q / math.sqrt(d_k)) @ head.u1
    bias = k @ head.u                                                   # (B, Tk)
    per = [(qw[..., h * d_k:(h + 1) * d_k] @ k[..., h * d_k:(h + 1) * d_k].transpose(1, 2)
            + bias[:, None, :]).softmax(-1) for h in range(n)]
    got = head.head_log_probs(q, k, None).exp()
    for h in range(n):
        assert torch.allclose(got[:, h], per[h], atol=1e-6)
    assert torch.allclose(head.log_probs(q, k, None).exp(), (per[0] + per[1]) / 2, atol=1e-6)
    dims = ModelDims(d_model=16, n_heads=4, encoder_layers=1, decoder_layers=1)   # d_k 4
    module = DBSAModule(dims, "src", 0, 1.0, "first", n_heads=n)
    x = torch.randn(2, 5, 16)
    terms = module.attention_terms("src", 0, {}, torch.arange(5), torch.arange(5))
    [override] = terms.head_overrides                  # one call computes both heads
    assert list(override.heads()) == [0, 1]
    with torch.no_grad():
        v = module.parse.v_proj(x)
        probs = module.parse.head_log_probs(module.parse.q_proj(x), module.parse.k_proj(x),
                                            None).exp()
        out = override.compute(x, x, None, None).out                     # [B, n, Tq, d_k]
        assert out.shape == (2, n, 5, d_k)
        for h in range(n):
            assert torch.allclose(out[:, h], probs[:, h] @ v[..., h * d_k:(h + 1) * d_k],
                                  atol=1e-6)


def test_causal_mask_keeps_the_future_out():
    head = ParseHead(16, 8)
    causal = torch.ones(4, 4, dtype=torch.bool).tril()
    probs = head.log_probs(torch.randn(2, 4, 8), torch.randn(2, 4, 8), causal).exp()
    assert (probs.triu(1) == 0).all() and torch.allclose(probs.sum(-1), torch.ones(2, 4))


def test_head_override_replaces_one_head_before_w_o():
    """Eq. 17: W^M [M_1; ...; M_parse; ...] with the other heads untouched."""
    torch.manual_seed(1)
    attn = MultiHeadAttention(16, 4).eval()
    x = torch.randn(2, 5, 16)
    mask = torch.ones(2, 1, 1, 5, dtype=torch.bool)
    own = torch.randn(2, 5, 4)
    result = HeadResult(own, KeyValues(own, own))
    terms = AttentionTerms([], None, [HeadOverride(2, lambda *a: result)])
    out = attn(x, x, mask, terms)
    assert torch.allclose(out, reference_attention(attn, x, x, mask, terms), atol=1e-5)
    assert not torch.allclose(out, attn(x, x, mask), atol=1e-3)
    with pytest.raises(ValueError, match="same attention head"):
        AttentionTerms.merge([AttentionTerms([], None, [HeadOverride(0, lambda *a: result)])] * 2)
    # heads 1 and 2 replaced by one call returning [B, 2, Tq, d_k]; head 3 by another scheme
    two = HeadResult(torch.randn(2, 2, 5, 4), KeyValues(own, own))
    ranged = AttentionTerms([], None, [HeadOverride(1, lambda *a: two, count=2),
                                       HeadOverride(3, lambda *a: result)])
    out = attn(x, x, mask, ranged)
    assert torch.allclose(out, reference_attention(attn, x, x, mask, ranged), atol=1e-5)
    with pytest.raises(ValueError, match="same attention head"):
        AttentionTerms.merge([ranged, AttentionTerms([], None, [HeadOverride(2, lambda *a: result)])])


@pytest.mark.parametrize("first, count", [(0, 1), (0, 2), (3, 1), (2, 2), (0, 4), (1, 2)])
def test_replaced_heads_are_not_computed(first, count, monkeypatch):
    """Replaced heads first or last: the layer attends with its other heads only (per-head
    biases sliced to them), the same output as computing all and dropping the replaced; in the
    middle (heads 1-2 of 4) or all of them (so that DDP sees their gradients), all are
    computed."""
    torch.manual_seed(2)
    attn = MultiHeadAttention(16, 4).eval()
    x = torch.randn(2, 5, 16)
    mask = torch.ones(2, 1, 1, 5, dtype=torch.bool)
    own = HeadResult(torch.randn(2, count, 5, 4), KeyValues(x, x))
    terms = AttentionTerms([], torch.randn(2, 4, 5, 5), [HeadOverride(first, lambda *a: own,
                                                                      count=count)])
    computed = []
    attend = MultiHeadAttention._attend
    monkeypatch.setattr(MultiHeadAttention, "_attend",
                        lambda self, q, *a: computed.append(q.shape[1]) or attend(self, q, *a))
    out = attn(x, x, mask, terms)
    assert torch.allclose(out, reference_attention(attn, x, x, mask, terms), atol=1e-5)
    middle = 0 < first and first + count < 4
    assert computed == ([4] if middle or count == 4 else [4 - count])


def test_parse_heads_sit_in_the_chosen_layers():
    m = model(layers=3, dbsa_enc_layer=3, dbsa_dec_layer=1)
    enc, dec = parts(m)["src"], parts(m)["tgt"]
    assert (enc.layer, dec.layer) == (2, 0)
    for layer in range(3):
        terms = m.schemes.attention_terms("src", layer, {}, torch.arange(3), torch.arange(3))
        assert (terms is not None and terms.head_overrides[0].head == 0) == (layer == 2)


def test_layer_beyond_the_model_is_a_clear_error():
    scheme = build_schemes(scheme_entries(["dbsa_enc"], {"dbsa_enc_layer": 4}))[0]
    with pytest.raises(DepnmtError, match="--dbsa-enc-layer 4: the encoder has 2 layers"):
        scheme.check(ModelConfig(10, 10, encoder_layers=2, decoder_layers=2).dims)


def test_gradients_reach_u1_and_u():
    m = model().train()
    exs, batch = batch_of(m)
    logits, extras = m(batch.src, batch.tgt_in, batch.src_feats, batch.tgt_feats)
    losses = extras.losses
    assert set(losses) == {"parse_enc", "parse_dec"}
    sum(l.value for l in losses.values()).backward(retain_graph=True)
    for side in ("src", "tgt"):
        head = parts(m)[side].parse
        for p in (head.u1, head.u, head.q_proj.weight, head.k_proj.weight):
            assert p.grad is not None and p.grad.abs().sum() > 0
    label_smoothed_nll(logits, batch.tgt_out, 0.1)[0].backward()
    assert all(parts(m)[side].parse.v_proj.weight.grad.abs().sum() > 0 for side in ("src", "tgt"))


# -- decoder side -----------------------------------------------------------------------------

def test_decoder_never_looks_ahead():
    """Changing future target tokens leaves earlier outputs and parse distributions unchanged."""
    m = model()
    src = torch.randint(4, 40, (2, 6))
    src[:, -1] = EOS
    tgt = torch.randint(4, 50, (2, 7))
    logits, extras = m(src, tgt, {})
    parse = extras.scores["parse_dec"]
    changed = tgt.clone()
    changed[:, 4:] = torch.randint(4, 50, (2, 3))
    logits2, extras2 = m(src, changed, {})
    parse2 = extras2.scores["parse_dec"]
    assert torch.allclose(logits[:, :4], logits2[:, :4], atol=1e-5)
    assert torch.allclose(parse[:, :4], parse2[:, :4], atol=1e-6)
    assert (parse.exp().triu(1) == 0).all()


@pytest.mark.parametrize("heads, scorer", [(1, "biaffine"), (2, "biaffine"), (2, "deep")])
def test_incremental_decoding_equals_full_recomputation(heads, scorer):
    """Steps read the key terms they cached (Q (K U1^T)^T for (Q U1) K^T, any head count and
    either scorer): the logits of a full pass up to fp32 rounding."""
    m = model("dbsa_dec+rel", dbsa_dec_layer=1, dbsa_heads=heads, dbsa_scorer=scorer)
    with torch.no_grad():                 # the key terms of a nonzero u, so that it counts
        parts(m)["tgt"].parse.u.normal_()
    src = torch.randint(4, 40, (3, 6))
    src[:, -1] = EOS
    src[0, 3], src[0, 4:] = EOS, PAD
    tgt = torch.randint(4, 50, (3, 6))
    memory, mask = m.encode(src, {})
    full = m.decode(tgt, m.start_state(memory, mask))
    state = m.start_state(memory, mask)
    steps = torch.cat([m.decode(tgt[:, t:t + 1], state, incremental=True) for t in range(6)], 1)
    assert torch.allclose(full, steps, atol=1e-5)
    cache = state.caches[0].heads[PARSE_HEAD]       # key terms of every position, kept
    assert isinstance(cache, ParseKeys) and cache.v.shape[1] == cache.kt.shape[1] == 6
    with torch.no_grad(), torch.autocast("cpu", torch.bfloat16):   # a search: weights kept
        full = m.decode(tgt, m.start_state(memory, mask)).float()
        state = m.start_state(memory, mask)
        steps = torch.cat([m.decode(tgt[:, t:t + 1], state, incremental=True)
                           for t in range(6)], 1).float()
    assert (full - steps).abs().max() < 0.05 * full.abs().max()
    # beam search reorders the parse head's cache with the others
    assert len(beam_search(m, src, {}, SearchConfig(beam=2, max_len_a=0, max_len_b=3))) == 3


@pytest.mark.parametrize("heads", [1, 2])
def test_imitating_parse_heads_compute_the_model_without_them(heads):
    """``imitate`` (U1 = I, u = 0, the replaced heads' projections): Eq. 14 becomes Eq. 2, so
    the model's logits are those of the same weights without DBSA, in a full pass and step by
    step (what bench/decode.py's grafts rely on)."""
    m = model("abs+dbsa_enc+dbsa_dec", dbsa_heads=heads)
    plain = TransformerNMT(ModelConfig(**{**m.cfg.to_dict(), "schemes": scheme_entries(
        resolve("abs"), {})})).eval()
    plain.load_state_dict(m.state_dict(), strict=False)
    src = torch.randint(4, 40, (3, 6))
    src[:, -1] = EOS
    src[0, 3], src[0, 4:] = EOS, PAD
    tgt = torch.randint(4, 50, (3, 5))

    def logits(net):
        with torch.no_grad():
            memory, mask = net.encode(src, {})
            full = net.decode(tgt, net.start_state(memory, mask))
            state = net.start_state(memory, mask, torch.float32)
            steps = torch.cat([net.decode(tgt[:, t:t + 1], state, incremental=True)
                               for t in range(tgt.shape[1])], 1)
        return full, steps

    before = logits(m)[0]
    for part in m.schemes.parts:
        if hasattr(part, "imitate"):
            layers = m.encoder if part.side == "src" else m.decoder
            part.imitate(layers[part.layer].self_attn)
    (full, steps), (want, _) = logits(m), logits(plain)
    assert not torch.allclose(before, want, atol=1e-3)       # the parse heads did differ
    assert torch.allclose(full, want, atol=1e-5) and torch.allclose(steps, want, atol=1e-5)
    with pytest.raises(ValueError, match="leaky ReLU"):
        parts(model(dbsa_scorer="deep"))["tgt"].imitate(m.decoder[1].self_attn)


def test_beam_search_with_the_caches_equals_uncached_decoding(monkeypatch):
    """Beam search reorders the parse head's keys/values with the other caches: at every step,
    every hypothesis's cached scores equal those of its whole prefix decoded without caches."""
    from depnmt.model.transformer import DecoderState
    m = model("abs+dbsa_dec+rel", dbsa_dec_layer=1, layers=1)
    src = torch.randint(4, 40, (3, 6))
    src[:, -1] = EOS
    src[0, 3], src[0, 4:] = EOS, PAD
    decode, reorder_targets = TransformerNMT.decode, DecoderState.reorder_targets
    gaps = []

    def checked(self, tgt_in, state, incremental=False, extras=None):
        state.prefix = torch.cat([getattr(state, "prefix", tgt_in[:, :0]), tgt_in], 1)
        cached = decode(self, tgt_in, state, incremental, extras)
        uncached = decode(self, state.prefix, state)[:, -tgt_in.shape[1]:]
        gaps.append(float((cached - uncached).abs().max()))
        return cached

    def reorder_prefix(self, index):
        reorder_targets(self, index)
        if hasattr(self, "prefix"):
            self.prefix = self.prefix[index]

    monkeypatch.setattr(TransformerNMT, "decode", checked)
    monkeypatch.setattr(DecoderState, "reorder_targets", reorder_prefix)
    beam_search(m, src, {}, SearchConfig(beam=3, alpha=0.0, max_len_a=0, max_len_b=6))
    assert len(gaps) == 6 and max(gaps) < 1e-5


def test_decoder_loss_drops_tokens_whose_head_is_in_the_future():
    m = model()
    exs, batch = batch_of(m, seed=3)
    extras = m(batch.src, batch.tgt_in, batch.src_feats, batch.tgt_feats)[1]
    head = batch.tgt_feats["dbsa_tgt_head"]
    logp = extras.scores["parse_dec"].detach()
    nll, n = 0.0, 0
    for b in range(head.shape[0]):
        for t in range(head.shape[1]):
            h = int(head[b, t]) - 1
            if 0 <= h <= t:                     # no supervision for BOS, padding, future heads
                nll -= float(logp[b, t, h])
                n += 1
    assert n < int((head > 0).sum())          # some heads were in the future
    loss = extras.losses["parse_dec"]
    assert float(loss.value.detach()) == pytest.approx(nll / n, rel=1e-5)


# -- supervision ------------------------------------------------------------------------------

def test_chain_rule_targets_fig4():
    """"Fing@@ er@@ print input ." with Fingerprint -> input, input = root, . -> input."""
    subwords = ["Fing@@", "er@@", "print", "in@@", "put", "."]
    heads = [2, 0, 2]
    first = parse_targets(heads, subwords, 6, 0, 7, "first")
    # er@@ = head(Fing@@), print = head(er@@), in@@ (first piece) = head(print); root's final
    # piece points to itself; the next piece inside "input"; EOS (position 6) has no head
    assert first["head"].tolist() == [2, 3, 4, 5, 5, 4, 0]
    assert first["word"].tolist() == [1, 1, 1, 2, 2, 3, 0]
    last = parse_targets(heads, subwords, 6, 0, 7, "last")
    assert last["head"].tolist() == [2, 3, 5, 5, 5, 5, 0]
    # the decoder's BOS shifts everything by one; truncation drops arcs that leave the kept part
    dec = parse_targets(heads, subwords, 3, 1, 4, "first")
    assert dec["head"].tolist() == [0, 3, 4, 0]


def test_features_are_only_computed_from_trees():
    m = model()
    ex = Example(0, [5, 6, EOS], [7], ["a", "b"], tgt_subwords=["c"])      # translate: no trees
    add_features([ex], m.schemes.schemes)
    assert ex.feats == {} and ex.tgt_feats == {}
    ex.src_tree = Sentence(["a"], [0], ["root"])
    with pytest.raises(DepnmtError, match="sentence 1"):
        add_features([ex], m.schemes.schemes)


# -- UAS and trees ----------------------------------------------------------------------------

def gold_log_probs(head: torch.Tensor) -> torch.Tensor:
    """Log-probabilities that put almost all mass on the gold head (uniform where none)."""
    b, l = head.shape
    scores = torch.zeros(b, l, l)
    rows = head > 0
    scores[rows] = scores[rows].scatter(-1, (head[rows] - 1).unsqueeze(-1), 20.0)
    return scores.log_softmax(-1)


def test_uas_counts_words_at_their_final_piece():
    feats = parse_targets([2, 0, 2], ["Fing@@", "er@@", "print", "in@@", "put", "."], 6, 0, 7,
                          "first")
    head, word = feats["head"][None], feats["word"][None]
    assert uas_counts(gold_log_probs(head), head, word, causal=False)[""] == (3, 3)
    wrong = head.clone()
    wrong[0, 2] = 6                      # "print" (Fingerprint's final piece) -> "."
    assert uas_counts(gold_log_probs(wrong), head, word, causal=False)[""] == (2, 3)
    causal = uas_counts(gold_log_probs(head), head, word, causal=True)
    assert causal["_visible"] == (2, 2)  # Fingerprint's head "input" comes after it


def brute_force_tree(scores: np.ndarray) -> float:
    n = scores.shape[0] - 1
    best = -math.inf
    for heads in itertools.product(range(n + 1), repeat=n):
        if any(h == d + 1 for d, h in enumerate(heads)) or tree_problem(list(heads)):
            continue
        best = max(best, sum(scores[d + 1, h] for d, h in enumerate(heads)))
    return best


@pytest.mark.parametrize("seed", range(12))
def test_max_spanning_tree_is_optimal_and_single_rooted(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 6))
    scores = rng.normal(size=(n + 1, n + 1)) * 3
    heads = max_spanning_tree(scores)
    assert tree_problem(heads) is None
    total = sum(scores[d + 1, h] for d, h in enumerate(heads))
    assert total == pytest.approx(brute_force_tree(scores))


def test_max_spanning_tree_keeps_an_argmax_that_is_a_tree():
    heads = [2, 0, 2, 3]
    scores = np.full((5, 5), -5.0)
    for d, h in enumerate(heads):
        scores[d + 1, h] = 0.0
    assert max_spanning_tree(scores) == heads


def test_induced_trees_are_valid_conllu(tmp_path):
    from depnmt.stages.parse import read_conllu, write_conllu
    subwords = ["Fing@@", "er@@", "print", "in@@", "put", "."]
    torch.manual_seed(0)
    noisy = induced_tree(torch.randn(7, 7).log_softmax(-1), subwords)   # argmax: any graph
    head = parse_targets([2, 0, 2], subwords, 6, 0, 7, "first")["head"]
    gold = induced_tree(gold_log_probs(head[None])[0], subwords)
    assert gold.words == ["Fingerprint", "input", "."] and gold.heads == [2, 0, 2]
    write_conllu(tmp_path / "t.conllu", [noisy, gold, Sentence.empty()])
    back = list(read_conllu(tmp_path / "t.conllu"))                      # rejects cycles
    assert [t.heads for t in back[:2]] == [noisy.heads, [2, 0, 2]] and len(back[2]) == 0


def test_model_induces_source_trees_after_encode():
    m = model()
    exs, batch = batch_of(m, seed=5)
    extras = Extras()
    m.encode(batch.src, batch.src_feats, extras)
    trees = m.schemes.induced_source_trees(extras, exs)
    assert [len(t) for t in trees] == [len(e.src_tree) for e in exs]
    assert all(tree_problem(t.heads) is None for t in trees)
    assert model("abs").schemes.induced_source_trees(extras, exs) is None


# -- the objective ----------------------------------------------------------------------------

def step_gradients(m: TransformerNMT, batch, weight: float) -> tuple[dict, dict]:
    """One update (Updater.step, without data loading) with both λ set to ``weight``."""
    from depnmt.training.config import TrainOptions
    from depnmt.training.step import Updater
    for part in parts(m).values():
        part.weight = weight
    updater = Updater(m, torch.device("cpu"), None, TrainOptions())   # net: the model itself
    updater.optimizer = torch.optim.SGD(m.parameters(), lr=0.0)
    updater.scheduler = torch.optim.lr_scheduler.LambdaLR(updater.optimizer, lambda s: 1.0)
    updater.optimizer.zero_grad = lambda set_to_none=True: None   # keep the step's gradients
    m.zero_grad()
    stats = updater.step([batch])
    grads = {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}
    return stats, grads


def test_lambda_zero_gives_the_plain_token_loss():
    m = model()
    exs, batch = batch_of(m, seed=7)
    stats, grads = step_gradients(m, batch, 0.0)
    m.zero_grad()
    m.train()
    loss, _ = label_smoothed_nll(m(batch.src, batch.tgt_in, batch.src_feats)[0], batch.tgt_out,
                                 0.1)
    (loss / batch.n_tokens).backward()
    assert stats["loss"] == pytest.approx(float(loss.detach()) / batch.n_tokens, rel=1e-6)
    assert set(stats["aux"]) == {"parse_enc", "parse_dec"}       # still reported
    for name, p in m.named_parameters():
        if p.grad is not None:
            assert torch.allclose(grads[name], p.grad, atol=1e-7), name

    stats1, grads1 = step_gradients(m, batch, 1.0)
    assert stats1["loss"] == pytest.approx(stats["loss"], rel=1e-6)   # the token loss alone
    u1 = "schemes.parts.1.parse.u1"
    assert not torch.allclose(grads1[u1], grads[u1])                    # + λ e_parse

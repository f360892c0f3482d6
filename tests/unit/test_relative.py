"""Relative schemes (rel, dep, deplabel, deplabel+rel): the gather/scatter fast path through the
whole model equals a literal implementation of the papers' equations with ``[B, T, T, d_k]``
per-pair vectors, for every scheme and ablation, on random trees and padded batches."""

from __future__ import annotations

import random

import pytest
import torch

from depnmt.core.errors import DepnmtError
from depnmt.core.trees import project_tree, random_heads
from depnmt.core.vocab import EOS
from depnmt.data.batches import Example, add_features, collate
from depnmt.model.attention import AttentionTerms, RelativeTerm, reference_attention
from depnmt.model.schemes.names import resolve
from depnmt.model.schemes.registry import scheme_entries
from depnmt.model.schemes.relative import dep_labels, deplabel_labels, shaw_labels
from depnmt.model.transformer import ModelConfig, TransformerNMT
from depnmt.stages.parse import Sentence

SCHEMES = ["rel", "dep", "dep+rel", "deplabel", "deplabel+rel", "abs+dep+rel", "abs+deplabel"]
TERMS = ["key,value", "key", "value", "none"]
K = 2


# -- the literal reference --------------------------------------------------------------------

def ancestors(heads: list[int], n: int) -> list[int]:
    """Node n's ancestors (0-based), walking up the 1-based heads; depth(n) is their number."""
    out = []
    while heads[n]:
        n = heads[n] - 1
        out.append(n)
    return out


def literal_relation(heads: list[int], i: int, j: int):
    """The Japanese paper's §3.1, pair by pair: a depth difference, "self", "sib" or "non_dep"."""
    if i == j:
        return "self"
    if j in ancestors(heads, i) or i in ancestors(heads, j):
        return len(ancestors(heads, j)) - len(ancestors(heads, i))
    if heads[i] and heads[i] == heads[j]:
        return "sib"
    return "non_dep"


def clip(x: int, k: int) -> int:
    return max(-k, min(k, x))                                       # Eq. 15


def lookup(param, layer: int, rows: torch.Tensor, d_k: int) -> torch.Tensor:
    """``w_{row}`` for every entry of ``rows`` (row 0 and an ablated table: the zero vector)
    from a ``[L, R − 1, d_k]`` parameter: ``rows.shape + (d_k,)``."""
    if param is None:
        return torch.zeros(rows.shape + (d_k,))
    return torch.cat([torch.zeros(1, d_k), param[layer]])[rows]


def tree_row(scheme: str, view, s: int, t: int, k: int) -> int:
    """Row of the table for subwords (s, t) of a tree scheme (0: a zero vector)."""
    i, j = view.node[s], view.node[t]
    if scheme == "dep":                                             # Eqs. 16, 19–20
        return clip(len(ancestors(view.heads, j)) - len(ancestors(view.heads, i)), k) + k + 1
    rel = literal_relation(view.heads, i, j)
    if rel == "self":
        return k + 1
    if rel == "sib":
        return 2 * k + 2
    if rel == "non_dep" or abs(rel) > k:
        return 0
    return rel + k + 1


def tree_rows(scheme: str, view, t: int) -> torch.Tensor:
    """``[T, T]`` rows of one sentence; EOS and padding (beyond the subwords) get 0."""
    n = len(view.node)
    return torch.tensor([[tree_row(scheme, view, i, j, K) if i < n and j < n else 0
                          for j in range(t)] for i in range(t)])


def pair_vectors(part, scheme: str, side: str, layer: int, views, t: int, d_k: int):
    """``[B, T, T, d_k]`` key and value vectors of one scheme component."""
    b = len(views)
    if scheme == "rel":                                             # Eqs. 13–14
        rows = torch.tensor([[clip(j - i, K) + K + 1 for j in range(t)] for i in range(t)])
        tables = part.sides[side]
        return (lookup(tables.key, layer, rows, d_k).expand(b, t, t, d_k),
                lookup(tables.value, layer, rows, d_k).expand(b, t, t, d_k))
    if scheme == "deplabel_rel":                                    # ja Eqs. 17–18
        a_k, a_v = pair_vectors(part.shaw, "rel", side, layer, views, t, d_k)
        if side != "src":
            return a_k, a_v
        b_k, b_v = pair_vectors(part.tree, "deplabel", side, layer, views, t, d_k)
        # W_rel exists only for the terms a or b uses (ablations): absent = no term
        w_k, w_v = (part.w_rel[n][layer] if n in part.w_rel else torch.zeros(2 * d_k, d_k)
                    for n in ("key", "value"))
        return torch.cat([a_k, b_k], -1) @ w_k, torch.cat([a_v, b_v], -1) @ w_v
    if side != "src":
        return torch.zeros(b, t, t, d_k), torch.zeros(b, t, t, d_k)
    rows = torch.stack([tree_rows(scheme, view, t) for view in views])
    return (lookup(part.tables.key, layer, rows, d_k),
            lookup(part.tables.value, layer, rows, d_k))


def summed_vectors(model, side, layer, views, t):
    """Eqs. 21–22: the per-pair vectors of all components, summed."""
    d_k = model.cfg.d_model // model.cfg.n_heads
    keys, values = torch.zeros(len(views), t, t, d_k), torch.zeros(len(views), t, t, d_k)
    for scheme, part in zip(model.schemes.schemes, model.schemes.parts):
        if scheme.name in ("abs", "none"):
            continue
        k, v = pair_vectors(part, scheme.name, side, layer, views, t, d_k)
        keys, values = keys + k, values + v
    return keys, values


def literal_attention(attn, x, mask, a_k, a_v):
    """Eqs. 11–12 / 17–18 / 21–22 with the summed per-pair vectors ``a_k``, ``a_v``
    ``[B, T, T, d_k]``: :func:`reference_attention` with one table row per pair."""
    b, t, _, dk = a_k.shape
    rows = torch.arange(b * t * t).view(b, t, t)
    term = RelativeTerm(rows, a_k.reshape(-1, dk), a_v.reshape(-1, dk))
    return reference_attention(attn, x, x, mask, AttentionTerms([term]))


def literal_forward(model, src, tgt_in, views):
    """The whole model with literal self-attention (cross-attention and FFN as in the model)."""
    s, t = src.shape[1], tgt_in.shape[1]
    src_mask = (src != 0)[:, None, None, :]
    x = model.schemes.embed(model.src_embed(src) * model.scale, "src", torch.arange(s), {})
    for i, layer in enumerate(model.encoder):
        a_k, a_v = summed_vectors(model, "src", i, views, s)
        x = layer.norm1(x + literal_attention(layer.self_attn, x, src_mask, a_k, a_v))
        x = layer.norm2(x + layer.ffn(x))
    memory = x
    y = model.schemes.embed(model.tgt_embed(tgt_in) * model.scale, "tgt", torch.arange(t), {})
    causal = torch.ones(t, t, dtype=torch.bool).tril()
    for i, layer in enumerate(model.decoder):
        a_k, a_v = summed_vectors(model, "tgt", i, views, t)
        y = layer.norm1(y + literal_attention(layer.self_attn, y, causal, a_k, a_v))
        y = layer.norm2(y + layer.cross_attn(y, memory, src_mask))
        y = layer.norm3(y + layer.ffn(y))
    return model.output(y)


# -- fixtures ---------------------------------------------------------------------------------

def random_example(index: int, n_words: int, rng: random.Random, bpe: bool) -> Example:
    words = [f"w{i}" for i in range(n_words)]
    subwords = [p for wd in words for p in ((wd[:1] + "@@", wd[1:]) if bpe and rng.random() < .4
                                            else (wd,))]
    ids = [rng.randrange(4, 40) for _ in subwords] + [EOS]
    return Example(index, ids, [rng.randrange(4, 50) for _ in range(rng.randrange(2, 6))],
                   subwords, Sentence(words, random_heads(n_words, rng), ["dep"] * n_words))


def tiny(spec: str, **options) -> TransformerNMT:
    torch.manual_seed(0)
    cfg = ModelConfig(40, 50, d_model=16, n_heads=2, d_ff=32, encoder_layers=2, decoder_layers=2,
                      dropout=0.0, schemes=scheme_entries(resolve(spec), {
                          "rel_k": K, "dep_l": K, "deplabel_k": K, **options}))
    return TransformerNMT(cfg).eval()


def batch_of(model, examples):
    add_features(examples, model.schemes.schemes)
    return collate(examples)


def views_of(examples, rule="chain", chain_head="last"):
    return [project_tree(e.src_tree.heads, e.src_subwords, rule, chain_head) for e in examples]


# -- tests ------------------------------------------------------------------------------------

@pytest.mark.parametrize("terms", TERMS)
@pytest.mark.parametrize("spec", SCHEMES)
def test_fast_path_equals_literal_equations(spec, terms):
    rng = random.Random(hash((spec, terms)) % 1000)
    model = tiny(spec, rel_terms=terms, dep_terms=terms, deplabel_terms=terms)
    examples = [random_example(i, n, rng, bpe=True) for i, n in enumerate([7, 3, 5])]
    batch = batch_of(model, examples)
    with torch.no_grad():
        fast = model(batch.src, batch.tgt_in, batch.src_feats)[0]
        slow = literal_forward(model, batch.src, batch.tgt_in, views_of(examples))
    keep = batch.tgt_out != 0
    assert torch.allclose(fast[keep], slow[keep], atol=1e-5)


@pytest.mark.parametrize("rule,chain_head", [("inherit", "last"), ("chain", "first")])
def test_fast_path_equals_literal_for_each_subword_rule(rule, chain_head):
    rng = random.Random(7)
    model = tiny("dep+rel", subword_tree=rule, chain_head=chain_head, rel_terms="key",
                 dep_terms="value")
    examples = [random_example(i, n, rng, bpe=True) for i, n in enumerate([6, 4])]
    batch = batch_of(model, examples)
    with torch.no_grad():
        fast = model(batch.src, batch.tgt_in, batch.src_feats)[0]
        slow = literal_forward(model, batch.src, batch.tgt_in,
                               views_of(examples, rule, chain_head))
    keep = batch.tgt_out != 0
    assert torch.allclose(fast[keep], slow[keep], atol=1e-5)


def test_padding_and_batch_company_do_not_change_a_sentence():
    rng = random.Random(3)
    model = tiny("abs+deplabel+rel")
    examples = [random_example(i, n, rng, bpe=True) for i, n in enumerate([3, 8, 5])]
    batch = batch_of(model, examples)
    alone = collate(examples[:1])
    with torch.no_grad():
        together = model.encode(batch.src, batch.src_feats)[0][0, :alone.src.shape[1]]
        single = model.encode(alone.src, alone.src_feats)[0][0]
    assert torch.allclose(together, single, atol=1e-5)


@pytest.mark.parametrize("spec", ["rel", "abs+rel", "deplabel+rel", "dep+rel"])
def test_incremental_decoding_equals_full_recomputation(spec):
    rng = random.Random(5)
    model = tiny(spec)
    batch = batch_of(model, [random_example(i, n, rng, bpe=False) for i, n in enumerate([5, 3])])
    tgt = torch.randint(4, 50, (2, 7))
    with torch.no_grad():
        full = model(batch.src, tgt, batch.src_feats)[0]
        memory, mask = model.encode(batch.src, batch.src_feats)
        state = model.start_state(memory, mask)
        steps = [model.decode(tgt[:, i:i + 1], state, incremental=True) for i in range(7)]
    assert torch.equal(torch.cat(steps, 1).argmax(-1), full.argmax(-1))
    assert torch.allclose(torch.cat(steps, 1), full, atol=1e-5)


def test_incremental_rel_labels_are_exactly_rows_of_the_full_matrix():
    full = shaw_labels(torch.arange(6), torch.arange(6), K)
    for t in range(6):
        step = shaw_labels(torch.tensor([t]), torch.arange(t + 1), K)
        assert torch.equal(step, full[t:t + 1, :t + 1])


def test_rel_on_a_chain_tree_equals_dep_where_they_coincide():
    """When word i's head is word i − 1 (word 1 the root), depth(n_i) = i, so dist_ij = j − i:
    dep's labels are rel's (k = l) on every word pair, and deplabel's within distance k."""
    n = 9
    chain = [0] + list(range(1, n))
    pos = torch.arange(n)
    assert torch.equal(dep_labels(chain, 3), shaw_labels(pos, pos, 3))
    near = (pos[None, :] - pos[:, None]).abs() <= 3
    assert torch.equal(deplabel_labels(chain, 3)[near], shaw_labels(pos, pos, 3)[near])
    assert (deplabel_labels(chain, 3)[~near] == 0).all()


def test_eos_row_and_column_are_no_term():
    model = tiny("dep+deplabel")
    ex = random_example(0, 4, random.Random(1), bpe=False)
    add_features([ex], model.schemes.schemes)
    for name in ("dep_labels", "deplabel_labels"):
        labels = ex.feats[name]
        assert labels.shape == (5, 5)
        assert (labels[-1] == 0).all() and (labels[:, -1] == 0).all()
        assert (labels[:4, :4] > 0).any()


def test_truncated_source_crops_the_labels():
    """Evaluation truncates ``src`` ids to max_len but keeps all subwords: labels follow the ids."""
    model = tiny("dep")
    ex = random_example(0, 6, random.Random(2), bpe=False)
    full = dep_labels(ex.src_tree.heads, K)
    ex.src = ex.src[:3] + [EOS]
    add_features([ex], model.schemes.schemes)
    assert torch.equal(ex.feats["dep_labels"][:3, :3].long(), full[:3, :3])
    assert (ex.feats["dep_labels"][3] == 0).all()


def test_tree_scheme_without_tree_is_a_user_error():
    model = tiny("dep")
    ex = Example(0, [5, EOS], [6], ["a"])
    with pytest.raises(DepnmtError, match="needs source trees"):
        add_features([ex], model.schemes.schemes)


def test_deplabel_plus_rel_means_the_joint_form_and_presets_resolve():
    assert resolve("deplabel+rel") == ["deplabel_rel"]
    assert resolve("Transformer_deplabel+rel") == ["abs", "deplabel_rel"]
    assert resolve("Transformer_dep+rel") == ["abs", "dep", "rel"]
    assert resolve("dep+rel") == ["dep", "rel"]


def test_ablated_tables_are_absent_and_no_term_rows_stay_zero():
    model = tiny("dep", dep_terms="key")
    tables = model.schemes.parts[0].tables
    assert tables.value is None
    key, value = tables.tables(0)
    assert value is None and (key[0] == 0).all()
    assert key.shape == (2 * K + 2, 8)

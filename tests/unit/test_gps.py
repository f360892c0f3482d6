"""GPS and its baselines (PASCAL, structural positions): root-path extraction on hand-made trees
(several roots joined by the parse stage, subwords), the cross-sentence mask, PASCAL's
per-sentence head selection, the batched fast path through the whole encoder against a
literal, sentence-by-sentence implementation of the papers' formulas, and AWSL (Eq. 7)."""

from __future__ import annotations

import math
import random

import pytest
import torch

from depnmt.core.errors import DepnmtError
from depnmt.core.layerlists import parse_layers
from depnmt.core.subwords import word_index
from depnmt.core.trees import random_heads
from depnmt.core.vocab import EOS
from depnmt.core.wordtable import WordTable
from depnmt.data.batches import Example, add_features, collate
from depnmt.evaluation.analyze import awsl, format_table, pair_weights, plot
from depnmt.model.schemes.absolute import sinusoidal_table
from depnmt.model.schemes.gps import (GPS, SPECIAL_LABELS, UNK_LABEL, example_paths, label_ids,
                                      label_paths, unique_paths)
from depnmt.model.schemes.names import resolve
from depnmt.model.schemes.pascal import parent_positions
from depnmt.model.schemes.registry import build_schemes, scheme_entries
from depnmt.model.schemes.structural import structural_distance
from depnmt.model.transformer import ModelConfig, TransformerNMT
from depnmt.stages.parse import Sentence
from depnmt.stages.parse.projection import join_roots

LABELS = ["nsubj", "obj", "det", "amod", "obl", "case"]
K = 2


# -- hand-made trees --------------------------------------------------------------------------

def fig1() -> Sentence:
    """"Tom and John go to school together" (the GPS paper's Fig. 1), UD-style."""
    words = "Tom and John go to school together".split()
    heads = [4, 3, 1, 0, 6, 4, 4]
    rels = ["nsubj", "cc", "conj", "root", "case", "obl", "advmod"]
    return Sentence(words, heads, rels)


def test_root_paths_are_label_sequences_root_first():
    paths = label_paths(fig1().heads, fig1().deprels)
    assert paths[5] == ["root", "obl"]                        # school, as in Fig. 1
    assert paths[3] == ["root"]
    assert paths[1] == ["root", "nsubj", "conj", "cc"]       # and
    assert paths[2] == ["root", "nsubj", "conj"]


def test_a_roots_own_label_is_always_root():
    assert label_paths([0, 1], ["ROOT", "dep"]) == [["root"], ["root", "dep"]]


def test_several_sentences_joined_by_the_parse_stage_restart_at_their_roots():
    # two parser sentences "A b . C d" (roots A and C), joined: C -> A with parataxis
    forest = Sentence(["A", "b", ".", "C", "d"], [0, 1, 1, 0, 4],
                      ["root", "obj", "punct", "root", "nsubj"], sent_ids=[0, 0, 0, 1, 1])
    joined = join_roots(forest)
    assert joined.heads[3] == 1 and joined.deprels[3] == "parataxis"
    paths = label_paths(joined.heads, joined.deprels, joined.sent_ids)
    assert paths == [["root"], ["root", "obj"], ["root", "punct"], ["root"], ["root", "nsubj"]]
    # several roots within one parser sentence stay joined: the path goes through parataxis
    one = join_roots(Sentence(forest.words, forest.heads, forest.deprels, sent_ids=[0] * 5))
    assert label_paths(one.heads, one.deprels, one.sent_ids)[4] == ["root", "parataxis", "nsubj"]


def gps_scheme(labels=LABELS, **options) -> GPS:
    return GPS(gps_labels=list(labels), **options)


def test_subwords_take_their_words_path_and_eos_has_none():
    tree = Sentence(["the", "schoolhouse", "stands"], [2, 3, 0], ["det", "nsubj", "root"])
    subwords = ["the", "school@@", "house", "stands"]
    ex = Example(0, [5, 6, 7, 8, EOS], [5], subwords, tree)
    feats = gps_scheme(["nsubj", "root"]).source_features(ex)   # "det" is not in the vocabulary
    ids = {"nsubj": 2, "root": 3}
    paths = feats["gps_paths"].long()
    assert paths.shape == (5, 5)
    assert paths[0, :3].tolist() == [ids["root"], ids["nsubj"], UNK_LABEL]
    assert paths[1].tolist() == paths[2].tolist() == [ids["root"], ids["nsubj"], 0, 0, 0]
    assert paths[3].tolist() == [ids["root"], 0, 0, 0, 0]
    assert (paths[4] == 0).all()                                  # EOS: no path
    assert feats["gps_sentence"].tolist() == [1, 1, 1, 1, 0]


def oracle_paths(example, ids, length):
    """``example_paths`` as first written: subword by subword, each path a tensor of its own."""
    tree = example.src_tree
    words = label_paths(list(tree.heads), list(tree.deprels), tree.sent_ids)
    sentence = tree.sent_ids or [0] * len(words)
    dtype = torch.uint8 if len(ids) + len(SPECIAL_LABELS) <= 256 else torch.int16
    paths = torch.zeros(length, length, dtype=dtype)
    sent = torch.zeros(length, dtype=torch.int16)
    for t, w in enumerate(word_index(list(example.src_subwords))[: length - 1]):
        path = [ids.get(label, UNK_LABEL) for label in words[w]][-length:]
        paths[t, : len(path)] = torch.tensor(path, dtype=dtype)
        sent[t] = sentence[w] + 1
    return paths, sent


@pytest.mark.parametrize("labels", [300, 6])
def test_paths_of_an_example_are_the_subword_by_subword_ones(labels):
    """Random trees (one or several parser sentences, deep chains), random subword splits,
    inputs cut short (a path longer than the input keeps its last labels), labels outside the
    vocabulary, a vocabulary of more than 254 labels (int16 ids)."""
    rng = random.Random(labels)
    names = [f"l{i}" for i in range(labels)]
    ids = label_ids(names[: labels - 2])
    for n in range(1, 60):
        sizes = [rng.randint(1, 12) for _ in range(1 if n % 4 else rng.randint(2, 3))]
        heads, sent_ids = [], []
        for k, size in enumerate(sizes):  # parser sentences, joined as the parse stage joins
            own = random_heads(size, rng) if n % 3 else list(range(size))      # or a chain
            heads += [h + len(sent_ids) if h else 0 for h in own]
            sent_ids += [k] * size
        words = [f"w{i}" for i in range(len(heads))]
        tree = join_roots(Sentence(words, heads, [rng.choice(names) for _ in words],
                                   sent_ids=sent_ids if len(sizes) > 1 else None))
        subwords = [piece for w in words
                    for piece in ([w] if rng.random() < 0.6 else [w[:1] + "@@", w[1:]])]
        example = Example(n, list(range(5, 5 + len(subwords))) + [EOS], [5], subwords, tree)
        for length in (len(subwords) + 1, max(1, len(subwords) // 2), 3):
            got, want = example_paths(example, ids, length), oracle_paths(example, ids, length)
            assert all(torch.equal(a, b) and a.dtype == b.dtype for a, b in zip(got, want)), (
                n, length)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int16])
def test_distinct_paths_on_the_host_are_torch_uniques(dtype):
    """The host's byte-string path gives ``torch.unique(dim=0)``'s rows, order and inverse
    (the device path), for shared and distinct paths, labels above 255, empty batches."""
    g = torch.Generator().manual_seed(3)
    for b, s, width, top in ((30, 17, 12, 5), (4, 3, 6, 300), (1, 1, 1, 2), (0, 5, 5, 3),
                             (6, 9, 9, 1)):
        top = min(top, 255) if dtype == torch.uint8 else top
        depth = torch.randint(0, width + 1, (b, s), generator=g)
        labels = torch.randint(1, top + 1, (b, s, width), generator=g)
        paths = torch.where(torch.arange(width) < depth.unsqueeze(-1), labels, 0).to(dtype)
        got = unique_paths(paths)
        longest = max(int((paths != 0).sum(-1).max()), 1) if paths.numel() else 1
        rows = paths[..., :longest].reshape(b * s, longest).long()
        unique, inverse = torch.unique(rows, dim=0, return_inverse=True)
        assert torch.equal(got[0], unique.to(dtype)) and got[0].dtype == dtype
        assert torch.equal(got[1], inverse.view(b, s)) and got[1].dtype == torch.int64


def test_label_vocabulary_is_learned_from_training_trees_most_frequent_first():
    trees = [fig1(), Sentence(["a", "b"], [0, 1], ["ROOT", "obl"])]
    learned = GPS().learn_options([WordTable.from_trees(t for t in trees)])["gps_labels"]
    assert learned[:2] == ["obl", "root"] and set(learned) == {"obl", "root", "nsubj", "cc",
                                                                "conj", "case", "advmod"}
    assert GPS(gps_labels=learned).learn_options([]) == {}      # --resume keeps its own
    with pytest.raises(DepnmtError, match="label vocabulary"):
        GPS().build(ModelConfig(10, 10, d_model=8, n_heads=2).dims)


def test_layer_lists():
    assert parse_layers("1", 6) == [0]                 # counted from 1; 0-based inside
    assert parse_layers("all", 3) == [0, 1, 2]
    assert parse_layers("3,1", 3) == [0, 2]
    for bad in ("4", "0", "x", "-1"):
        with pytest.raises(DepnmtError, match="from 1|numbered"):
            parse_layers(bad, 3)


def test_presets_resolve():
    assert resolve("Transformer_gps") == ["abs", "gps"]
    assert resolve("Transformer_pascal") == ["abs", "pascal"]
    assert resolve("Transformer_structural") == ["abs", "structural"]
    assert resolve("abs+gps+pascal+structural+rel") == ["abs", "gps", "pascal", "structural",
                                                        "rel"]


# -- PASCAL's parents and the structural distance on hand-made trees --------------------------

def test_pascal_parents_in_subword_coordinates():
    tree = Sentence(["the", "schoolhouse", "stands"], [2, 3, 0], ["det", "nsubj", "root"])
    subwords = ["the", "school@@", "house", "stands"]
    assert parent_positions(tree.heads, None, subwords, "mean") == [1.5, 3.0, 3.0, 3.0]
    assert parent_positions(tree.heads, None, subwords, "first") == [1.0, 3.0, 3.0, 3.0]
    # the second sentence's root (joined with parataxis) is its own parent
    joined = join_roots(Sentence(["A", "b", "C", "d"], [0, 1, 0, 3],
                                 ["root", "obj", "root", "nsubj"], sent_ids=[0, 0, 1, 1]))
    assert parent_positions(joined.heads, joined.sent_ids, joined.words) == [0.0, 0.0, 2.0, 2.0]
    assert parent_positions(joined.heads, None, joined.words) == [0.0, 0.0, 0.0, 2.0]


def test_structural_distance_on_fig1():
    dist = structural_distance(fig1().heads)
    # depths: go 0; Tom, school, together 1; John, to 2; and 3
    assert dist[5, 3] == 1 and dist[3, 5] == -1           # school under go: same root path
    assert dist[1, 3] == 3                                # and (depth 3) to go (0), same path
    assert dist[5, 0] == 2 and dist[0, 5] == -2           # school / Tom: different paths
    assert dist[4, 1] == 5                                # to (2) and "and" (3), i > j
    assert (dist.diagonal() == 0).all()


# -- the literal reference --------------------------------------------------------------------

def sentence_of(tree: Sentence) -> list[int]:
    return tree.sent_ids or [0] * len(tree.words)


def literal_parent(tree: Sentence, w: int) -> int | None:
    """Word w's head (0-based), or None when w is the root of its parser sentence."""
    h = tree.heads[w]
    return None if h == 0 or sentence_of(tree)[h - 1] != sentence_of(tree)[w] else h - 1


def literal_path(tree: Sentence, w: int) -> list[str]:
    labels = []
    while (p := literal_parent(tree, w)) is not None:
        labels.append(tree.deprels[w])
        w = p
    return ["root"] + labels[::-1]


def words_of(subwords: list[str]) -> list[int]:
    out, w = [], 0
    for piece in subwords:
        out.append(w)
        w += not piece.endswith("@@")
    return out


def literal_structural(tree: Sentence, a: int, b: int) -> int:
    """Wang et al.'s rel(x_a, x_b) for words a, b, walking parents."""
    def up(w):
        chain = [w]
        while (p := literal_parent(tree, chain[-1])) is not None:
            chain.append(p)
        return chain
    da, db = len(up(a)) - 1, len(up(b)) - 1
    if b in up(a) or a in up(b):
        return da - db
    return da + db if a > b else -(da + db)


def literal_mean_parent(tree: Sentence, subwords: list[str], t: int) -> float:
    of_word = words_of(subwords)
    w = of_word[t]
    p = literal_parent(tree, w)
    target = w if p is None else p
    where = [i for i, x in enumerate(of_word) if x == target]
    return sum(where) / len(where)


def normal_pdf(x: float, mu: float, sigma: float) -> float:
    return math.exp(-(x - mu) ** 2 / (2 * sigma ** 2)) / math.sqrt(2 * math.pi * sigma ** 2)


def literal_path_embeddings(model: TransformerNMT, ex: Example) -> torch.Tensor:
    """GPS's ``s_i = LSTM(p_i)`` token by token, 0 for EOS: ``[T, dim]``."""
    gps = dict(zip(model.cfg.scheme_names, model.schemes.parts))["gps"]
    labels = {k: v for s in model.cfg.schemes for k, v in s["options"].items()}["gps_labels"]
    ids = {label: i + len(SPECIAL_LABELS) for i, label in enumerate(labels)}
    of_word = words_of(ex.src_subwords)
    s = torch.zeros(len(ex.src), gps.paths.lstm.hidden_size)
    for t in range(len(ex.src) - 1):
        path = torch.tensor([[ids.get(label, UNK_LABEL)
                              for label in literal_path(ex.src_tree, of_word[t])]])
        s[t] = gps.paths.lstm(gps.paths.embed(path))[0][0, -1]
    return s


def literal_encode(model: TransformerNMT, ex: Example) -> torch.Tensor:
    """One sentence, unpadded, every term written out pair by pair: ``[T, D]``."""
    opts = {k: v for s in model.cfg.schemes for k, v in s["options"].items()}
    names = model.cfg.scheme_names
    parts = dict(zip(names, model.schemes.parts))
    tree, subwords = ex.src_tree, ex.src_subwords
    t_len, n = len(ex.src), len(ex.src) - 1
    of_word = words_of(subwords)
    h, dk = model.cfg.n_heads, model.cfg.d_model // model.cfg.n_heads
    src = torch.tensor(ex.src)
    x = model.src_embed(src) * model.scale
    table = sinusoidal_table(64, model.cfg.d_model)
    if "abs" in names:
        x = x + table[:t_len]                                             # Vaswani et al.
    if "structural" in names:                                             # PE(depth) per token
        for t in range(n):
            x[t] = x[t] + table[len(literal_path(tree, of_word[t])) - 1]
    s = literal_path_embeddings(model, ex) if "gps" in names else None
    for layer_no, layer in enumerate(model.encoder):
        attn = layer.self_attn
        q = attn.q_proj(x).view(t_len, h, dk)
        k = attn.k_proj(x).view(t_len, h, dk)
        v = attn.v_proj(x).view(t_len, h, dk)
        z = torch.zeros(t_len, h, dk)
        a_k = a_v = None
        if "structural" in names:
            a_k, a_v = parts["structural"].tables.tables(layer_no)
        for head in range(h):
            e = torch.zeros(t_len, t_len)
            for i in range(t_len):
                for j in range(t_len):
                    e[i, j] = q[i, head] @ k[j, head]
                    if a_k is not None and i < n and j < n:            # Shaw-style table
                        rel = literal_structural(tree, of_word[i], of_word[j])
                        e[i, j] += q[i, head] @ a_k[max(-K, min(K, rel)) + K + 1]
                    e[i, j] /= math.sqrt(dk)
                    if "pascal" in names and head >= h - opts["pascal_heads"]:   # S ⊙ N
                        p = literal_mean_parent(tree, subwords, i) if i < n else float(n)
                        e[i, j] *= normal_pdf(j, p, opts["pascal_sigma"])
                    if s is not None and i < n and j < n and \
                            sentence_of(tree)[of_word[i]] == sentence_of(tree)[of_word[j]]:
                        sq = parts["gps"].query[str(layer_no)](s[i]).view(h, dk)[head]
                        sk = parts["gps"].key[str(layer_no)](s[j]).view(h, dk)[head]
                        e[i, j] += sq @ sk / math.sqrt(dk)             # Eq. 5
            alpha = e.softmax(-1)
            for i in range(t_len):
                for j in range(t_len):
                    z[i, head] += alpha[i, j] * v[j, head]
                    if a_v is not None and i < n and j < n:
                        rel = literal_structural(tree, of_word[i], of_word[j])
                        z[i, head] += alpha[i, j] * a_v[max(-K, min(K, rel)) + K + 1]
        x = layer.norm1(x + attn.out_proj(z.reshape(t_len, h * dk)))
        x = layer.norm2(x + layer.ffn(x))
    return x


# -- fixtures ---------------------------------------------------------------------------------

def random_example(index: int, n_words: int, rng: random.Random, two_sentences: bool = False,
                   bpe: bool = True) -> Example:
    words = [f"w{i}" for i in range(n_words)]
    subwords = [p for wd in words for p in ((wd[:1] + "@@", wd[1:]) if bpe and rng.random() < .4
                                            else (wd,))]
    ids = [rng.randrange(4, 40) for _ in subwords] + [EOS]
    if two_sentences:                         # two parser sentences, joined as the parse stage
        cut = n_words // 2
        heads = random_heads(cut, rng) + [h + cut if h else 0
                                          for h in random_heads(n_words - cut, rng)]
        tree = join_roots(Sentence(words, heads, [rng.choice(LABELS) for _ in words],
                                   sent_ids=[0] * cut + [1] * (n_words - cut)))
    else:
        heads = random_heads(n_words, rng)
        tree = Sentence(words, heads, ["root" if h == 0 else rng.choice(LABELS) for h in heads])
    return Example(index, ids, [rng.randrange(4, 50) for _ in range(3)], subwords, tree)


def tiny(spec: str, **options) -> TransformerNMT:
    torch.manual_seed(0)
    opts = {"gps_labels": LABELS[:4] + ["root", "parataxis"], "gps_layer": "all",
            "pascal_layer": "all", "pascal_heads": 1, "pascal_sigma": 1.5,
            "structural_k": K, "subword_tree": "inherit", **options}
    cfg = ModelConfig(40, 50, d_model=16, n_heads=2, d_ff=32, encoder_layers=2,
                      decoder_layers=1, dropout=0.0, schemes=scheme_entries(resolve(spec), opts))
    return TransformerNMT(cfg).eval()


def batch_of(model, examples):
    """The examples' batch, collated with the model's schemes as training does."""
    add_features(examples, model.schemes.schemes)
    return collate(examples, model.schemes.schemes)


# -- fast path == literal formulas -------------------------------------------------------------

@pytest.mark.parametrize("spec", ["abs+gps", "abs+pascal", "abs+structural",
                                  "abs+gps+pascal+structural"])
def test_batched_encoder_equals_the_literal_formulas(spec):
    rng = random.Random(len(spec))
    model = tiny(spec)
    examples = [random_example(i, n, rng, two_sentences=i == 1)
                for i, n in enumerate([6, 7, 3])]
    batch = batch_of(model, examples)
    with torch.no_grad():
        memory, _ = model.encode(batch.src, batch.src_feats)
        for b, ex in enumerate(examples):
            slow = literal_encode(model, ex)
            assert torch.allclose(memory[b, :len(ex.src)], slow, atol=1e-5), (spec, b)


def test_gps_bottom_layer_only_leaves_the_other_layers_alone():
    model = tiny("abs+gps", gps_layer="1")
    rng = random.Random(4)
    batch = batch_of(model, [random_example(0, 5, rng)])
    gps = model.schemes.parts[1]
    assert gps.layers == [0] and set(gps.query) == {"0"}
    assert model.schemes.attention_terms("src", 1, batch.src_feats, torch.arange(6),
                                         torch.arange(6)) is None


def test_cross_sentence_pairs_and_eos_get_no_syntax_term():
    model = tiny("gps")
    rng = random.Random(9)
    ex = random_example(0, 6, rng, two_sentences=True, bpe=False)
    batch = batch_of(model, [ex, random_example(1, 2, rng, bpe=False)])
    with torch.no_grad():
        feats = model.schemes.prepare_features("src", batch.src_feats)
        bias = model.schemes.parts[0].syntax_logits(0, feats)[0]              # (H, S, S)
    sent = torch.tensor(sentence_of(ex.src_tree))
    across = sent[:, None] != sent[None, :]
    assert across.any() and (bias[:, :6, :6][:, across] == 0).all()
    assert (bias[:, :6, :6][:, ~across] != 0).all()
    assert (bias[:, 6] == 0).all() and (bias[:, :, 6] == 0).all()           # EOS
    with torch.no_grad():
        other = model.schemes.parts[0].syntax_logits(0, feats)[1]
    assert (other[:, 2:] == 0).all() and (other[:, :, 2:] == 0).all()     # EOS and padding


def test_each_distinct_path_is_encoded_once():
    model = tiny("gps")
    rng = random.Random(2)
    examples = [random_example(i, n, rng) for i, n in enumerate([5, 6, 4])]
    batch = batch_of(model, examples)
    seen = []
    encoder = model.schemes.parts[0].paths
    handle = encoder.register_forward_hook(lambda m, args, out: seen.append(args[0].shape[0]))
    with torch.no_grad():
        model.encode(batch.src, batch.src_feats)
    handle.remove()
    ids = {label: i + len(SPECIAL_LABELS)
           for i, label in enumerate(next(s for s in model.schemes.schemes
                                                   if s.name == "gps").option("gps_labels"))}
    distinct = {tuple(ids.get(label, UNK_LABEL) for label in literal_path(ex.src_tree, w))
                for ex in examples for w in range(len(ex.src_tree.words))}
    assert seen == [len(distinct) + 1]                    # + the empty path of EOS/padding


def test_distinct_paths_are_found_on_the_host_when_the_batch_is_collated(monkeypatch):
    """``gps_unique [U, L]`` holds the batch's distinct paths cut to the longest (sorted: the
    empty path of EOS/padding first), ``gps_inverse [B, S]`` each token's row of it; the
    examples' own features, computed at load time, are not computed again."""
    model = tiny("gps")
    rng = random.Random(8)
    examples = [random_example(i, n, rng) for i, n in enumerate([5, 8, 2])]
    add_features(examples, model.schemes.schemes)
    monkeypatch.setattr(GPS, "source_features", lambda self, ex: pytest.fail("computed again"))
    batch = collate(examples, model.schemes.schemes)
    paths = batch.src_feats["gps_paths"]
    unique, inverse = batch.src_feats["gps_unique"], batch.src_feats["gps_inverse"]
    longest = int((paths != 0).sum(-1).max())
    assert unique.shape[1] == longest and not paths[..., longest:].any()
    assert torch.equal(unique[inverse], paths[..., :longest])
    assert len({tuple(row) for row in unique.tolist()}) == len(unique)
    assert unique[0].tolist() == [0] * longest and inverse.shape == batch.src.shape


def test_paths_deduplicated_on_the_host_give_the_devices_results_bit_for_bit():
    """A batch collated with the model's schemes brings GPS's distinct paths from the host
    (the step reads no size back from a GPU); one collated without them is deduplicated by
    the model on the device. A training step (path-encoder dropout on) of either gives the
    same logits and gradients, bit for bit."""
    from depnmt.model.transformer import label_smoothed_nll
    model = tiny("abs+gps", gps_dropout=0.2).train()
    rng = random.Random(5)
    examples = [random_example(i, n, rng, two_sentences=i == 1)
                for i, n in enumerate([6, 9, 4])]
    host = batch_of(model, examples)
    device = collate(examples)
    assert "gps_unique" in host.src_feats and "gps_unique" not in device.src_feats
    steps = []
    for batch in (host, device):
        model.zero_grad()
        torch.manual_seed(3)
        logits, _ = model(batch.src, batch.tgt_in, batch.src_feats)
        label_smoothed_nll(logits, batch.tgt_out, 0.1)[0].backward()
        steps.append((logits, [p.grad.clone() for p in model.parameters()]))
    (logits, grads), (logits2, grads2) = steps
    assert torch.equal(logits, logits2)
    assert all(torch.equal(a, b) for a, b in zip(grads, grads2))
    assert all(p.grad.abs().sum() > 0 for p in model.schemes.parts[1].paths.parameters())


def test_padding_and_batch_company_do_not_change_a_sentence():
    model = tiny("abs+gps+pascal+structural")
    rng = random.Random(11)
    examples = [random_example(i, n, rng) for i, n in enumerate([3, 9, 5])]
    batch = batch_of(model, examples)
    alone = collate(examples[:1])
    with torch.no_grad():
        together = model.encode(batch.src, batch.src_feats)[0][0, :alone.src.shape[1]]
        single = model.encode(alone.src, alone.src_feats)[0][0]
    assert torch.allclose(together, single, atol=1e-5)


# -- PASCAL's head selection -------------------------------------------------------------------

def test_pascal_scales_the_last_heads_of_every_sentence_with_its_own_parents():
    """Per sentence b and head h: heads H − n … H − 1 carry N(j | p_i) of sentence b, the
    others 1 — unlike a slice of a folded batch×heads axis, which picks whole sentences."""
    model = tiny("pascal", pascal_heads=1, pascal_layer="1")
    rng = random.Random(5)
    examples = [random_example(i, n, rng) for i, n in enumerate([4, 6, 5, 3])]
    batch = batch_of(model, examples)
    s = batch.src.shape[1]
    scale = model.schemes.attention_terms("src", 0, batch.src_feats, torch.arange(s),
                                          torch.arange(s)).logit_scale      # (B, H, S, S)
    assert scale.shape == (4, 2, s, s)
    for b, ex in enumerate(examples):
        assert (scale[b, 0] == 1).all()
        n = len(ex.src) - 1
        for i in range(n + 1):
            p = literal_mean_parent(ex.src_tree, ex.src_subwords, i) if i < n else float(n)
            expected = torch.tensor([normal_pdf(j, p, 1.5) for j in range(s)])
            assert torch.allclose(scale[b, 1, i], expected, atol=1e-6)
    assert model.schemes.attention_terms("src", 1, batch.src_feats, torch.arange(s),
                                         torch.arange(s)) is None


def test_pascal_parent_ignoring_only_in_training():
    model = tiny("pascal", pascal_parent_ignoring=1.0)
    batch = batch_of(model, [random_example(0, 5, random.Random(1))])
    pos = torch.arange(batch.src.shape[1])
    assert (model.schemes.attention_terms("src", 0, batch.src_feats, pos, pos).logit_scale
            != 1).any()
    model.train()
    assert (model.schemes.attention_terms("src", 0, batch.src_feats, pos, pos).logit_scale
            == 1).all()


def test_pascal_heads_must_fit_the_model():
    with pytest.raises(DepnmtError, match="exceed"):
        for scheme in build_schemes(scheme_entries(["pascal"], {"pascal_heads": 3})):
            scheme.check(ModelConfig(10, 10, d_model=8, n_heads=2).dims)
    for bad, match in (({"pascal_layer_heads": "2"}, "1 counts for the 2 layer"),
                       ({"pascal_layer_heads": "1,3"}, "exceed")):
        with pytest.raises(DepnmtError, match=match):
            for scheme in build_schemes(scheme_entries(["pascal"],
                                                       {"pascal_layer": "all", **bad})):
                scheme.check(ModelConfig(10, 10, d_model=8, n_heads=2, encoder_layers=2).dims)


def pascal_scales(model, example, layer):
    batch = batch_of(model, [example])
    pos = torch.arange(batch.src.shape[1])
    terms = model.schemes.attention_terms("src", layer, batch.src_feats, pos, pos)
    return None if terms is None else terms.logit_scale[0]              # (H, S, S)


def test_pascal_uniform_window_is_the_references_unipdf():
    """The reference's ``unipdf``: 1[|j − p_i| < w + 1] on the chosen heads, worked by hand.
    Tree: w0 <- w1 (root) -> w2, w3 <- w2; no BPE: parents p = (1, 1, 1, 2), EOS (4) itself."""
    tree = Sentence(["w0", "w1", "w2", "w3"], [2, 0, 2, 3], ["det", "root", "obj", "amod"])
    ex = Example(0, [5, 6, 7, 8, EOS], [], ["w0", "w1", "w2", "w3"], src_tree=tree)
    model = tiny("pascal", pascal_layer="1", pascal_weighting="uniform", pascal_window=1.0)
    scale = pascal_scales(model, ex, 0)
    window = torch.tensor([[1, 1, 1, 0, 0],       # p = 1: j in {0, 1, 2} (|j − 1| < 2)
                           [1, 1, 1, 0, 0],
                           [1, 1, 1, 0, 0],
                           [0, 1, 1, 1, 0],       # p = 2: j in {1, 2, 3}
                           [0, 0, 0, 1, 1]],      # EOS, p = 4: j in {3, 4}
                          dtype=torch.float32)
    assert torch.equal(scale[1], window) and (scale[0] == 1).all()
    wide = pascal_scales(tiny("pascal", pascal_layer="1", pascal_weighting="uniform",
                              pascal_window=0.0), ex, 0)
    assert torch.equal(wide[1], torch.eye(5)[[1, 1, 1, 2, 4]])      # w = 0: the parent alone


def test_pascal_per_layer_head_counts():
    """--pascal-layer-heads 2,0: both heads of layer 0 scaled, layer 1 left alone (the
    reference's --encoder-pascal-heads 2 0); the default (one count) is unchanged."""
    ex = random_example(0, 5, random.Random(3))
    model = tiny("pascal", pascal_layer="all", pascal_layer_heads="2,0")
    scale = pascal_scales(model, ex, 0)
    assert (scale != 1).any(dim=(1, 2)).tolist() == [True, True]
    assert pascal_scales(model, ex, 1) is None
    base = tiny("pascal", pascal_layer="all")                          # pascal_heads 1
    one = tiny("pascal", pascal_layer="all", pascal_layer_heads="1,1")
    for layer in (0, 1):
        assert torch.equal(pascal_scales(base, ex, layer), pascal_scales(one, ex, layer))
        assert (pascal_scales(base, ex, layer)[0] == 1).all()


def test_structural_features_eos_and_clipping():
    model = tiny("structural")
    ex = random_example(0, 6, random.Random(3), bpe=False)
    add_features([ex], model.schemes.schemes)
    labels, depth = ex.feats["struct_labels"].long(), ex.feats["struct_depth"].long()
    assert (labels[-1] == 0).all() and (labels[:, -1] == 0).all() and depth[-1] == 0
    for a in range(6):
        assert depth[a] == len(literal_path(ex.src_tree, a))
        for b in range(6):
            assert labels[a, b] == max(-K, min(K, literal_structural(ex.src_tree, a, b))) + K + 1


def test_schemes_need_trees():
    model = tiny("abs+gps+pascal+structural")
    for scheme in model.schemes.schemes[1:]:
        with pytest.raises(DepnmtError, match="needs source trees"):
            scheme.source_features(Example(0, [5, EOS], [6], ["a"]))


def test_incremental_decoding_is_unaffected():
    model = tiny("abs+gps+pascal+structural")
    rng = random.Random(6)
    batch = batch_of(model, [random_example(i, n, rng) for i, n in enumerate([5, 3])])
    tgt = torch.randint(4, 50, (2, 5))
    with torch.no_grad():
        full = model(batch.src, tgt, batch.src_feats)[0]
        memory, mask = model.encode(batch.src, batch.src_feats)
        state = model.start_state(memory, mask)
        steps = [model.decode(tgt[:, i:i + 1], state, incremental=True) for i in range(5)]
    assert torch.allclose(torch.cat(steps, 1), full, atol=1e-5)


# -- AWSL (Eq. 7) ------------------------------------------------------------------------------
def literal_awsl(model, examples, layer: int) -> tuple[float, float]:
    """Eq. 7 sentence by sentence (unpadded), head by head, pair by pair; the layer-0 input is
    the embedding output."""
    assert layer == 0
    gps = model.schemes.parts[1]
    attn = model.encoder[0].self_attn
    h, dk = attn.n_heads, attn.d_k
    syntax, standard = [], []
    for ex in examples:
        add_features([ex], model.schemes.schemes)
        src = torch.tensor([ex.src])
        feats = {k: v.unsqueeze(0) for k, v in ex.feats.items()}
        x = model.schemes.embed(model.src_embed(src) * model.scale, "src",
                                torch.arange(len(ex.src)), feats)
        es_all = gps.syntax_logits(0, model.schemes.prepare_features("src", feats))[0]
        q = attn.q_proj(x)[0].view(-1, h, dk)
        k = attn.k_proj(x)[0].view(-1, h, dk)
        n = len(ex.src) - 1                                       # EOS excluded
        for head in range(h):
            ws, wd = 0.0, 0.0
            for i in range(n):
                for j in range(n):
                    e = float(q[i, head] @ k[j, head]) / math.sqrt(dk)
                    es = float(es_all[head, i, j])
                    ws += abs(es) / (abs(e) + abs(es))
                    wd += abs(e) / (abs(e) + abs(es))
            syntax.append(ws / n ** 2)
            standard.append(wd / n ** 2)
    return sum(syntax) / len(syntax), sum(standard) / len(standard)


def test_awsl_equals_eq7_written_out():
    model = tiny("abs+gps", gps_layer="1")
    rng = random.Random(0)
    examples = [random_example(i, n, rng, two_sentences=i == 2) for i, n in enumerate([5, 8, 6])]
    add_features(examples, model.schemes.schemes)
    with torch.no_grad():
        layers = awsl(model, examples, max_tokens=20)             # several batches
        expected_syntax, expected_standard = literal_awsl(model, examples, 0)
    assert layers[0].syntax_term and not layers[1].syntax_term
    assert layers[0].awsl == pytest.approx(expected_syntax, abs=1e-5)
    assert layers[0].standard == pytest.approx(expected_standard, abs=1e-5)
    assert layers[0].awsl + layers[0].standard == pytest.approx(1.0, abs=1e-5)
    assert layers[1].awsl == 0.0 and layers[1].count == 0
    assert layers[0].count == 3 * 2                               # sentences × heads


def test_pair_weights_ignore_padding_and_eos():
    e = torch.ones(1, 1, 3, 3)
    es = torch.full((1, 1, 3, 3), 3.0)
    tokens = torch.tensor([[True, True, False]])
    syntax, standard, real = pair_weights(e, es, tokens)
    assert syntax.item() == pytest.approx(0.75) and standard.item() == pytest.approx(0.25)
    assert real.tolist() == [True]


def test_awsl_needs_a_gps_model_and_writes_table_and_plot(tmp_path):
    with pytest.raises(DepnmtError, match="needs a GPS model"):
        awsl(tiny("abs+pascal"), [])
    model = tiny("abs+gps", gps_layer="all")
    example = random_example(0, 4, random.Random(1))
    add_features([example], model.schemes.schemes)
    with torch.no_grad():
        layers = awsl(model, [example])
    assert all(w.syntax_term for w in layers) and EOS == 3
    table = format_table([("m", layers)])
    assert table.splitlines()[0].split("\t") == ["model", "layer", "syntax_term", "awsl",
                                                 "standard", "sentence_heads"]
    assert len(table.splitlines()) == 3
    plot([("m", layers)], tmp_path / "awsl.png")
    assert (tmp_path / "awsl.png").read_bytes()[:4] == b"\x89PNG"


# -- depnmt inspect --scheme path ----------------------------------------------------------------

FIG1_CONLLU = """\
# text = Tom and John go to school together
1\tTom\t_\t_\t_\t_\t4\tnsubj\t_\t_
2\tand\t_\t_\t_\t_\t3\tcc\t_\t_
3\tJohn\t_\t_\t_\t_\t1\tconj\t_\t_
4\tgo\t_\t_\t_\t_\t0\troot\t_\t_
5\tto\t_\t_\t_\t_\t6\tcase\t_\t_
6\tschool\t_\t_\t_\t_\t4\tobl\t_\t_
7\ttogether\t_\t_\t_\t_\t4\tadvmod\t_\t_

# text = A b C
1\tA\t_\t_\t_\t_\t0\troot\t_\tSentIdx=0
2\tb\t_\t_\t_\t_\t1\tobj\t_\tSentIdx=0
3\tC\t_\t_\t_\t_\t1\tparataxis\t_\tSentIdx=1

"""


def test_inspect_path_prints_each_tokens_root_path(tmp_path):
    from click.testing import CliRunner

    from depnmt.cli import cli
    result = CliRunner().invoke(cli, ["inspect", "--scheme", "abs+gps"], input=FIG1_CONLLU)
    assert result.exit_code == 0, result.output
    assert result.output == ("Tom\troot>nsubj\nand\troot>nsubj>conj>cc\nJohn\troot>nsubj>conj\n"
                             "go\troot\nto\troot>obl>case\nschool\troot>obl\n"
                             "together\troot>advmod\n\nA\troot\nb\troot>obj\nC\troot\n")
    codes = tmp_path / "codes"
    codes.write_text("#version: 0.2\ns c\nsc h\n")
    result = CliRunner().invoke(cli, ["inspect", "--scheme", "abs+gps", "--bpe-codes", codes],
                                input=FIG1_CONLLU.split("\n\n")[0] + "\n\n")
    assert result.exit_code == 0, result.output
    assert "\nsch@@\troot>obl\no@@\troot>obl\no@@\troot>obl\nl\troot>obl\n" in result.output
    assert result.output.endswith("e@@\troot>advmod\nr\troot>advmod\n")   # toge@@ … r


def test_structural_distance_worked_example_full_matrix():
    """Every pair of a small tree, computed by hand from the definitions in structural.py's
    docstring (the paper's §3.2 as confirmed by a secondary source; see its provenance note).

    "the cat sat on mats": sat is the root; the→cat→sat, on→mats→sat.
    abs (depths):  the 2, cat 1, sat 0, on 2, mats 1.
    On one root path: the/cat/sat, on/mats/sat (difference abs_i − abs_j); across the two
    branches (the|cat vs on|mats): ±(abs_i + abs_j), + when i > j."""
    heads = [2, 3, 0, 5, 3]
    expected = [
        #  the  cat  sat   on  mats          (j)
        [   0,   1,   2,  -4,  -3],         # the  (i = 0)
        [  -1,   0,   1,  -3,  -2],         # cat
        [  -2,  -1,   0,  -2,  -1],         # sat
        [   4,   3,   2,   0,   1],         # on
        [   3,   2,   1,  -1,   0],         # mats
    ]
    assert structural_distance(heads).tolist() == expected


def test_gps_path_encoder_dropout():
    """``--gps-dropout p`` (the paper's path-encoder dropout, §4.1): in training s_i is
    stochastic and zeroes whole units of the label embeddings' LSTM output with rate ≈ p; in
    evaluation, and with p = 0 (the default), it is the plain LSTM's output."""
    from depnmt.model.schemes.gps import PathEncoder
    torch.manual_seed(0)
    paths = torch.randint(2, 9, (400, 4))
    plain = PathEncoder(9, 16)
    dropped = PathEncoder(9, 16, p=0.3)
    dropped.load_state_dict(plain.state_dict())
    expected = plain(paths)
    assert torch.equal(dropped.eval()(paths), expected)
    assert torch.equal(plain.train()(paths), expected)             # p = 0: unchanged
    out = dropped.train()(paths)
    assert not torch.allclose(out, expected)
    assert 0.2 < float((out == 0).float().mean()) < 0.4             # s_i's units dropped at ≈ p
    assert GPS().option("gps_dropout") == 0.0

"""``factors`` — source factors (Sennrich & Haddow 2016, "Linguistic Input Features Improve
Neural Machine Translation", WMT, §2): linguistic features of every source word as extra input
embeddings, a baseline every syntax-NMT comparison is expected to include.

The paper's encoder input (§2, Eq. 5) for a word with ``|F|`` features is the concatenation of
one embedding per feature, ``E x_j = ‖_{k=1}^{|F|} E_k x_jk``, with the total size fixed (the
word embedding shrinks by what the features take, §4.2). Here, per source position,

    sum:    x_j = E_tok[x_j] + Σ_k E_k[f_jk]                     (each E_k ∈ R^{V_k × d})
    concat: x_j = [E_tok[x_j]_{1..d−F} ; E_1[f_j1] ; … ; E_|F|[f_j|F|]]    (E_k ∈ R^{V_k × m},
            F = |F| · m, so the input keeps d_model dimensions)

after the token embedding and the other schemes' embeddings (with ``abs`` first, ``concat``
replaces the last F dimensions of token + PE; ``sum`` adds to all of them).

**Features** (``--factors``, any of): ``label`` — the word's dependency relation (CoNLL-U
DEPREL); ``pos`` — its UPOS tag; ``dir`` — where its head is: ``root``, ``left`` (the head
precedes the word) or ``right``; ``subword`` — the paper's subword tags ``B``/``I``/``E`` for
the first, inner and last piece of a word split by BPE, ``O`` for a word that is one piece.
Every piece of a word carries its word's label, POS and direction (the paper's rule, §3.2).
Label and POS vocabularies are learned from the training trees (most frequent first) and stored
in the model config (``factor_vocab``); a value unseen in training is ``<unk>``; EOS has its own
id. The PASCAL authors' fork has the same baseline as ``transformer_tagemb`` (one tag per token,
summed into the embedding: ``fairseq_tags_encoder.py``); ``--factors label --factor-combine
sum`` is that setting.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np
import torch
from torch import Tensor, nn

from depnmt.core.errors import DepnmtError
from depnmt.core.subwords import word_spans
from depnmt.core.wordtable import WordTable, counts_by_name
from depnmt.model.schemes.base import ModelDims, Scheme, SchemeModule, sentence_errors
from depnmt.model.schemes.options import Choice, IntRange, learned, option
from depnmt.model.schemes.registry import register

FACTORS = ("label", "pos", "dir", "subword")
LEARNED = ("label", "pos")                      # vocabularies read from the training trees
FIXED = {"dir": ["root", "left", "right"], "subword": ["B", "I", "E", "O"]}
SPECIALS = ("<pad>", "<unk>", "<eos>")
PAD_ID, UNK_ID, EOS_ID = 0, 1, 2
COMBINE = ("sum", "concat")


def check_factor_list(value: Any) -> Any:
    """The check of ``--factors``: a comma-separated subset of :data:`FACTORS`."""
    if value is not None:
        parts = [p.strip() for p in str(value).split(",")]
        if not parts or any(p not in FACTORS for p in parts) or len(set(parts)) != len(parts):
            raise ValueError(f"'{value}': expected some of {', '.join(FACTORS)}, "
                             f"comma-separated, each once")
    return value


@dataclass
class FactorOptions:
    factors: str = option("label,pos,dir", "factors: source word features embedded with each "
                          "token, comma-separated: label, pos, dir (head left/right/root), "
                          "subword (B/I/E/O)", check=check_factor_list)
    factor_combine: str = option("sum", "factors: add each feature's d_model embedding (sum) "
                                 "or replace the last dimensions of the input with the "
                                 "features' embeddings (concat, the paper's fixed total size)",
                                 Choice(COMBINE))
    factor_dim: int = option(16, "factors: embedding size of each feature with --factor-combine "
                             "concat", IntRange(min=1))
    factor_vocab: dict | None = learned("the label and POS values of the training trees, most "
                                        "frequent first")


def word_values(tree: Any) -> dict[str, list[str]]:
    """Each word's ``label``, ``pos`` and ``dir`` (``_`` where the tree has no UPOS)."""
    upos = tree.upos or ["_"] * len(tree.words)
    dirs = ["root" if h == 0 else ("left" if h - 1 < w else "right")
            for w, h in enumerate(tree.heads)]
    return {"label": list(tree.deprels), "pos": list(upos), "dir": dirs}


def subword_values(tree: Any, subwords: list[str]) -> dict[str, list[str]]:
    """Every factor's value at every subword: a word's pieces share its label, POS and
    direction; ``subword`` is B/I/E (first/inner/last piece) or O (a one-piece word)."""
    spans = word_spans(list(subwords))
    if len(spans) != len(tree.words):
        raise ValueError(f"{len(spans)} words in the subwords but {len(tree.words)} in the tree")
    words = word_values(tree)
    out: dict[str, list[str]] = {name: [] for name in FACTORS}
    for w, (start, end) in enumerate(spans):
        n = end - start
        for name in ("label", "pos", "dir"):
            out[name] += [words[name][w]] * n
        out["subword"] += ["O"] if n == 1 else ["B"] + ["I"] * (n - 2) + ["E"]
    return out


class FactorModule(SchemeModule):
    """One embedding table per factor, added to or concatenated into the source input."""

    def __init__(self, dims: ModelDims, sizes: dict[str, int], combine: str, dim: int):
        super().__init__()
        self.names, self.combine = list(sizes), combine
        width = dims.d_model if combine == "sum" else dim
        self.tables = nn.ModuleDict({name: nn.Embedding(size, width, padding_idx=PAD_ID)
                                     for name, size in sizes.items()})
        for table in self.tables.values():
            nn.init.normal_(table.weight, std=width ** -0.5)
            with torch.no_grad():
                table.weight[PAD_ID].zero_()

    def embed(self, x: Tensor, side: str, positions: Tensor, feats: dict[str, Tensor]) -> Tensor:
        """``x [B, S, d]`` -> ``[B, S, d]`` with the factors of ``feats["factor_<name>"] [B,
        S]``."""
        if side != "src":
            return x
        parts = [self.tables[n](feats[f"factor_{n}"]).to(x.dtype) for n in self.names]
        if self.combine == "sum":
            return x + torch.stack(parts).sum(0)
        width = sum(p.shape[-1] for p in parts)
        return torch.cat([x[..., :x.shape[-1] - width], *parts], dim=-1)


@register
class Factors(Scheme):
    name = "factors"
    help = "source factors (Sennrich & Haddow 2016): label/POS/head direction embeddings"
    needs_source_trees = True
    Options = FactorOptions

    def names(self) -> list[str]:
        return [p.strip() for p in str(self.option("factors")).split(",")]

    def vocab(self, name: str) -> list[str]:
        if name in FIXED:
            return FIXED[name]
        learned_values = self.option("factor_vocab") or {}
        if name not in learned_values:
            raise DepnmtError("scheme 'factors': no learned vocabulary (train it on trees)")
        return list(learned_values[name])

    def learn_options(self, trees: Iterable[WordTable]) -> dict[str, Any]:
        """``factor_vocab``: label and POS values of the training trees (``_`` for a tree
        without UPOS), most frequent first."""
        if self.option("factor_vocab"):
            return {}
        counts: dict[str, Counter] = {name: Counter() for name in LEARNED}
        for table in trees:
            counts["label"].update(counts_by_name(table.rel, table.rels))
            pos = np.where(table.upos < 0, len(table.tags), table.upos)
            counts["pos"].update(counts_by_name(pos, table.tags + ["_"]))
        return {"factor_vocab": {name: sorted(c, key=lambda v: (-c[v], v))
                                 for name, c in counts.items()}}

    def source_features(self, example: Any) -> dict[str, Tensor]:
        """``factor_<name> [T]`` for every chosen factor: ids of the subwords' values, EOS last."""
        tree = self.source_tree(example)
        with sentence_errors(example):
            values = subword_values(tree, example.src_subwords)
        n = len(example.src) - 1
        return {f"factor_{name}": torch.tensor([ids.get(v, UNK_ID) for v in values[name][:n]]
                                               + [EOS_ID], dtype=torch.long)
                for name, ids in self.value_ids().items()}

    def value_ids(self) -> dict[str, dict[str, int]]:
        """Per chosen factor, value -> id (after the specials); built once, on first use (the
        learned vocabularies are final by then: features are computed after learning)."""
        if getattr(self, "_ids", None) is None:
            self._ids = {name: {v: i + len(SPECIALS) for i, v in enumerate(self.vocab(name))}
                         for name in self.names()}
        return self._ids

    def check(self, dims: ModelDims) -> None:
        if self.option("factor_combine") == "concat" and \
                self.option("factor_dim") * len(self.names()) >= dims.d_model:
            raise DepnmtError(f"--factor-dim {self.option('factor_dim')} × {len(self.names())} "
                              f"factors leaves no room for the token in d_model {dims.d_model}")

    def build(self, dims: ModelDims) -> SchemeModule:
        self.check(dims)
        sizes = {name: len(self.vocab(name)) + len(SPECIALS) for name in self.names()}
        return FactorModule(dims, sizes, self.option("factor_combine"),
                            int(self.option("factor_dim")))


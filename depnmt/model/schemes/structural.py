"""``structural`` — structural position representations (Wang, Tu, Wang and Shi 2019,
"Self-Attention with Structural Position Representations", EMNLP), a baseline of the GPS paper
(Table 2, "Structure Position"). Two parts, both on the encoder (``--structural-parts``):

* **absolute structural position** — a word's depth on the dependency tree, its distance from the
  root, ``abs(x_i) = depth(x_i)``, encoded by the sinusoidal functions of the sequential PE
  (:func:`~depnmt.model.schemes.absolute.sinusoids`) and added to the source embeddings;
* **relative structural position** — for a pair (i, j), their signed distance on the tree,

      rel(x_i, x_j) =  abs(x_i) − abs(x_j)       if x_i and x_j lie on one root path
                                                 (one is an ancestor of the other, or i = j)
                       abs(x_i) + abs(x_j)       otherwise, if i > j
                      −(abs(x_i) + abs(x_j))     otherwise, if i < j

  clipped to ``±k`` (``--structural-k``) and looked up in learned key and value tables in every
  encoder self-attention layer exactly as Shaw et al.'s relative positions
  (``e_ij = x_i W^Q (x_j W^K + a^K_ij)^T / √d_k``, ``z_i = Σ_j α_ij (x_j W^V + a^V_ij)``), through
  the gather/scatter relative term of :mod:`depnmt.model.attention`. Unlike ``dep``'s depth
  difference, the label is no function of a class of each token (whether the pair lies on one
  root path is a relation of the pair), so it has no factored form: a GPU attends with these
  terms by the explicit path, not by extra head dimensions.

"Alone or with the sequential positions": the sequential encodings are the separate components
``abs`` (Vaswani et al.) and ``rel`` (Shaw et al.); listed together their terms are summed
(``abs+structural`` adds PE(pos) + PE(depth) to the embeddings; ``rel+structural`` adds both
relative terms, like ``dep+rel``). The 0.1.0 preset ``Transformer_structural`` is
``abs+structural``.

**Rules.** Trees reach subwords by ``--subword-tree`` / ``--chain-head`` (as ``dep``;
:func:`depnmt.core.trees.project_tree`). Several sentences on one line are separate trees (the parse
stage's ``parataxis`` join is undone, :func:`depnmt.core.trees.sentence_heads`); a pair across them
is "not on one root path". EOS and padding get no absolute term and relative label 0 (no term).

*Provenance:* the paper's own text (arXiv 1909.00383, §3.2, its Eqs. for ``abs`` and ``rel``)
was **not** available (the public copies found hold only its abstract and introduction; no public
code of the authors' was found). What a secondary source (a public Chinese-language summary of the
paper) confirms: ``abs`` is the distance on the dependency tree from the word to the origin, the
main verb (= the root); ``rel`` of a pair on one path is the difference of their ``abs``, of any
other pair their sum times +1 or −1 by word order, and 0 for a word with itself. Still
**unverified**: (1) which word order gets the + sign (depnmt gives + to i > j, the opposite of
the sequential relative position ``j − i`` of Shaw et al., which is negative for i > j); (2) how
the paper combines the sequential and structural absolute positions: the summary says through a
nonlinear function, where depnmt sums PE(pos) + PE(depth). Compare numbers with the paper's
Table 2 only with these two caveats. The worked example in ``tests/unit/test_gps.py``
(``test_structural_distance_worked_example_full_matrix``) is computed by hand from the
definitions above, not taken from the paper.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from depnmt.core.trees import ancestor_matrix, depths, project_tree, sentence_heads
from depnmt.model.attention import AttentionTerms
from depnmt.model.schemes.absolute import sinusoids
from depnmt.model.schemes.base import ModelDims, Scheme, SchemeModule, sentence_errors
from depnmt.model.schemes.options import Choice, IntRange, SubwordTreeOptions, option
from depnmt.model.schemes.registry import register
from depnmt.model.schemes.relative import (RelativeTables, distance_labels, subword_depth,
                                           with_special_tokens)

PARTS = ("abs,rel", "abs", "rel")


@dataclass
class StructuralOptions(SubwordTreeOptions):
    structural_k: int = option(8, "structural: relative structural positions are clipped to ±K",
                               IntRange(min=0))
    structural_parts: str = option("abs,rel", "structural: absolute (depth PE), relative (tree "
                                   "distance tables) or both", Choice(PARTS))


def structural_distance(heads: list[int]) -> Tensor:
    """``rel(x_i, x_j)`` of every node pair (the module docstring), ``[n, n]`` int64."""
    depth = torch.tensor(depths(heads), dtype=torch.long)
    ancestor = ancestor_matrix(heads)
    lineal = ancestor | ancestor.t() | torch.eye(len(heads), dtype=torch.bool)
    diff = depth[:, None] - depth[None, :]
    total = depth[:, None] + depth[None, :]
    order = torch.arange(len(heads))
    sign = torch.where(order[:, None] > order[None, :], 1, -1)
    return torch.where(lineal, diff, sign * total)


class StructuralModule(SchemeModule):
    """PE(depth) on the source embeddings and/or the relative structural tables."""

    def __init__(self, dims: ModelDims, k: int, parts: set[str]):
        super().__init__()
        self.k, self.parts = k, parts
        self.tables = RelativeTables(dims.encoder_layers, 2 * k + 2, dims.d_k,
                                     {"key", "value"}) if "rel" in parts else None

    def embed(self, x: Tensor, side: str, positions: Tensor, feats: dict[str, Tensor]) -> Tensor:
        if side != "src" or "abs" not in self.parts:
            return x
        depth = feats["struct_depth"].long()                       # (B, S), depth + 1; 0 = none
        pe = sinusoids(depth - 1, x.shape[-1]) * (depth > 0).unsqueeze(-1)
        return x + pe.to(x.dtype)

    def attention_terms(self, side: str, layer: int, feats: dict[str, Tensor], q_pos: Tensor,
                        k_pos: Tensor) -> AttentionTerms | None:
        if side != "src" or self.tables is None:
            return None
        return self.tables.term(feats["struct_labels"].long(), layer)


@register
class Structural(Scheme):
    name = "structural"
    help = "Wang et al. (2019) structural positions: tree depth PE + tree distance tables"
    needs_source_trees = True
    Options = StructuralOptions
    prefix, clip = "structural", "k"        # option structural_k (as TreeScheme's; inspect)

    def parts(self) -> set[str]:
        return set(self.option("structural_parts").split(","))

    def source_features(self, example: Any) -> dict[str, Tensor]:
        """``struct_depth [T]`` (depth + 1, 0 for EOS) and ``struct_labels [T, T]``."""
        tree = self.source_tree(example)
        heads = sentence_heads(list(tree.heads), tree.sent_ids)
        with sentence_errors(example):
            view = project_tree(heads, example.src_subwords, self.option("subword_tree"),
                                self.option("chain_head"))
        length, k = len(example.src), int(self.option("structural_k"))
        labels = view.expand(distance_labels(structural_distance(view.heads), k))
        return {"struct_depth": subword_depth(view, length),
                "struct_labels": with_special_tokens(labels, length, 2 * k + 2)}

    def pair_labels(self, example: Any) -> Tensor:
        """The relative structural positions' labels of :meth:`source_features` without the EOS
        row and column (``depnmt inspect``)."""
        return self.source_features(example)["struct_labels"][:-1, :-1].long()

    def label_text(self, label: int) -> str:
        return str(label - int(self.option("structural_k")) - 1)     # clip(rel(x_i, x_j), k)

    def build(self, dims: ModelDims) -> SchemeModule:
        return StructuralModule(dims, int(self.option("structural_k")), self.parts())

"""``treedist`` — tree distance: the length of the path between two words in the source
dependency tree, as Shaw-style relative positions.

For a pair (i, j) of source tokens the label is their distance on the tree,

    d_ij = depth(i) + depth(j) − 2 · depth(lca(i, j))      (arcs on the path, either direction)

clipped to ``k`` (``--treedist-k``) and looked up, as ``clip(d_ij, k) + 1``, in learned key and
value tables of every encoder self-attention layer exactly as Shaw et al.'s relative positions
(``e_ij = x_i W^Q (x_j W^K + a^K_ij)^T / √d_k``, ``z_i = Σ_j α_ij (x_j W^V + a^V_ij)``; Omote et
al. 2019 Eqs. 11–12), through the gather/scatter relative term of :mod:`depnmt.model.attention`.
Unlike ``dep`` (depth(n_j) − depth(n_i)) the distance is symmetric and tells siblings (2) from
words at the same depth in other branches (4, 6, …); unlike ``structural`` it has no sign.

*Provenance:* no paper is reproduced here; this scheme shows that a scheme is one module plus a
registry line. Its default ``k = 4`` is our choice (most dependency paths in
a short sentence are shorter), not a tuned value.

**Rules.** Trees reach subwords by ``--subword-tree`` / ``--chain-head`` (as ``dep``,
:func:`depnmt.core.trees.project_tree`: with ``chain``, a word's pieces are 1 apart; with
``inherit``, at distance 0). Label 0 is "no term" (a zero row): EOS, padding, and pairs with no
path (two trees of a forest). Ablations: ``--treedist-terms``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from depnmt.core.trees import tree_distance
from depnmt.model.schemes.options import IntRange, SubwordTreeOptions, option
from depnmt.model.schemes.registry import register
from depnmt.model.schemes.relative import TreeScheme, terms_option


def treedist_labels(heads: list[int], k: int) -> Tensor:
    """``clip(d_ij, k) + 1`` over the nodes of ``heads`` (0: no path): ``[n, n]`` int64."""
    dist = tree_distance(heads)
    return torch.where(dist >= 0, dist.clamp(max=k) + 1, torch.zeros_like(dist))


@dataclass
class TreeDistanceOptions(SubwordTreeOptions):
    treedist_k: int = option(4, "treedist: tree distances (path lengths) are clipped to K",
                             IntRange(min=1))
    treedist_terms: str = terms_option("treedist's key / value tables")


@register
class TreeDistance(TreeScheme):
    name = "treedist"
    help = "tree distance: path length of i and j on the source tree, clipped to k"
    Options = TreeDistanceOptions
    feature, prefix, clip, labels = "treedist_labels", "treedist", "k", \
        staticmethod(treedist_labels)

    def label_text(self, label: int) -> str:
        return str(label - 1) if label else "none"                      # clip(d_ij, k)

    def rows(self) -> int:
        """0 (no term), then distances 0 … k."""
        return self.clip_value() + 2

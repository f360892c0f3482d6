"""What a relative scheme sees: the per-pair matrix of a tree, printed like the papers' tables.

Row ``i``, column ``j`` is the value for the pair ``(i, j)`` before it becomes a table index:

* ``rel``       ``j − i`` (Shaw et al. 2018; Omote et al. 2019 Eqs. 13–15);
* ``dep``       ``depth(n_j) − depth(n_i)`` (Omote et al. 2019 Eq. 16, Table 1);
* ``deplabel``  that depth difference for ancestor/descendant pairs, ``self``, ``sib`` or
  ``non_dep`` (the Japanese paper, §3.1, Table 1).

``path`` (GPS) is no matrix: one line per token, the token, a tab and its root path joined by
``>`` (``school<TAB>root>obl``); subwords show their word's path (:mod:`depnmt.model.schemes.gps`).

With ``clip`` the values are clipped as the model clips them (Eqs. 15, 19–20); for ``deplabel``
a pair beyond the clip gets the zero vector, exactly like ``non_dep``, and is shown as
``non_dep``. Given subwords, the matrix is over the subwords' tree (:mod:`depnmt.trees`).
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from .trees import LINEAL, NON_DEP, SELF, SIB, pair_relations, project_tree, relative_depth

SCHEMES = ("dep", "deplabel", "rel", "path")
RELATION_NAMES = {SELF: "self", SIB: "sib", NON_DEP: "non_dep"}


def _int_cells(values: Tensor, clip: int | None) -> list[list[str]]:
    if clip is not None:
        values = values.clamp(-clip, clip)
    return [[str(v) for v in row] for row in values.tolist()]


def _deplabel_cell(dist: int, relation: int, clip: int | None) -> str:
    if relation != LINEAL:
        return RELATION_NAMES[relation]
    return RELATION_NAMES[NON_DEP] if clip is not None and abs(dist) > clip else str(dist)


def pair_cells(scheme: str, heads: Sequence[int], tokens: Sequence[str], clip: int | None = None,
               rule: str = "chain", chain_head: str = "last") -> list[list[str]]:
    """The ``[n, n]`` cells of ``scheme`` for the tree ``heads`` over ``tokens`` (words, or
    subwords with "@@ " markers, projected by ``rule``)."""
    if scheme == "rel":
        pos = torch.arange(len(tokens))
        return _int_cells(pos[None, :] - pos[:, None], clip)
    tree = project_tree(heads, tokens, rule, chain_head)
    dist = tree.expand(relative_depth(tree.heads))
    if scheme == "dep":
        return _int_cells(dist, clip)
    if scheme == "deplabel":
        relation = tree.expand(pair_relations(tree.heads))
        return [[_deplabel_cell(d, r, clip) for d, r in zip(drow, rrow)]
                for drow, rrow in zip(dist.tolist(), relation.tolist())]
    raise ValueError(f"unknown scheme {scheme!r}; choose from {SCHEMES}")


def format_matrix(tokens: Sequence[str], cells: list[list[str]]) -> str:
    """A tab-then-tokens header row, then one row per token: the token, then its cells."""
    rows = ["\t" + "\t".join(tokens)]
    rows += [token + "\t" + "\t".join(row) for token, row in zip(tokens, cells)]
    return "\n".join(rows) + "\n"


def format_paths(tree, tokens: Sequence[str]) -> str:
    """``path``: one ``token<TAB>root>…>label`` line per token (words, or subwords with "@@ "
    markers, which take their word's path), as the GPS scheme reads them."""
    from .subwords import word_index
    from .model.schemes.gps import label_paths
    paths = label_paths(list(tree.heads), list(tree.deprels), tree.sent_ids)
    return "".join(f"{token}\t{'>'.join(paths[w])}\n"
                   for token, w in zip(tokens, word_index(list(tokens))))

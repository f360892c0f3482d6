"""Relative positional schemes: ``rel`` (Shaw et al. 2018), ``dep`` (Omote et al. 2019, RANLP),
``deplabel`` and ``deplabel_rel`` (Omote et al. 2019, NLP — "the Japanese paper", methods 1, 2).

Each scheme hands self-attention a :class:`~depnmt.model.attention.RelativeTerm`: per-pair label
indices and learned tables (one ``[R, d_k]`` pair per layer, shared by the heads); attention
adds them in gather/scatter form. Label 0 is "no term": its table row is a fixed zero.

=========  ==========================================================  =========================
scheme     label of the pair (i, j)                                    where
=========  ==========================================================  =========================
rel        clip(j − i, k) + k + 1                     (Eqs. 13–15)     encoder and decoder
dep        clip(dist_ij, l) + l + 1,                  (Eqs. 16, 19–20) encoder
           dist_ij = depth(n_j) − depth(n_i)
deplabel   ancestor/descendant: dist_ij + k + 1 if |dist_ij| ≤ k,      encoder
           self: k + 1, sib: 2k + 2; non_dep and |dist_ij| > k: 0
           (ja §3.1–3.2, Table 1: a zero vector for those)
=========  ==========================================================  =========================

Equation numbers without "ja" are Omote et al. 2019 (RANLP); one term changes Eqs. 5 and 7 into
``z_i = Σ_j α_ij (x_j W^V + w^V_ij)`` and ``e_ij = x_i W^Q (x_j W^K + w^K_ij)^T / √d_z``
(Eqs. 11–12, 17–18); two schemes listed together (``dep+rel``) add two terms, which sums them
(Eqs. 21–22). ``deplabel_rel`` (ja method 2, ja Eqs. 17–20) joins Shaw's ``a`` and the tree's
``b`` as ``c = Concat(a_ij, b_ij) W_rel``, ``W_rel ∈ R^{2d_k × d_k}`` (one for keys, one for
values); because both come from finite tables, ``Concat(a, b) W_rel = a W_rel[:d_k] +
b W_rel[d_k:]``, so it is two terms with projected tables. Its decoder self-attention uses Shaw's
``a`` alone (there is no target tree). ``--scheme deplabel+rel`` means this joint form.

**Special tokens.** Tree labels are 0 ("no term") in the EOS row and column and for padding, so
EOS and padding never add to a real pair and real pairs never depend on them. ``rel`` treats EOS
as an ordinary position (Shaw et al. label every pair of the sequence); padding keys are masked.

**Fused attention.** ``dep``'s label depends only on the two tokens' depths, so its terms also
reach attention as per-token classes (:class:`~depnmt.model.attention.LabelFactors`: each
token's depth, the batch's depths ``0 … D`` as key classes), with which a GPU attends in one
fused kernel with the depths as extra head dimensions (:mod:`depnmt.model.attention`). The
features: ``dep_depth [T]`` (depth + 1 of each subword's node, 0 for EOS and padding) and, for
a batch collated with the model's schemes, ``dep_depth_values [D + 1]`` (``0 … D``, the batch's
range, found on the host so that the step reads nothing back from the GPU; a batch without it
takes the other paths). ``rel``'s clipped ``j − i`` would need the key's position as its class
(``Tk`` wide): it is not factored.

**Subwords.** Trees are over words; ``--subword-tree chain|inherit`` and ``--chain-head
last|first`` choose how they reach subwords (:mod:`depnmt.core.trees`). Ablations (Omote Table 3):
``--rel-terms``, ``--dep-terms``, ``--deplabel-terms`` ∈ {key,value, key, value, none}; the
absolute PE is a separate component (``abs``), left out to remove it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from depnmt.core.trees import (LINEAL, NON_DEP, SIB, SubwordTree, depths, pair_relations,
                               project_tree, relative_depth)
from depnmt.model.attention import AttentionTerms, ClippedDistance, LabelFactors, RelativeTerm
from depnmt.model.derived import Derived
from depnmt.model.schemes.base import ModelDims, Scheme, SchemeModule, sentence_errors
from depnmt.model.schemes.options import Choice, IntRange, SubwordTreeOptions, option
from depnmt.model.schemes.registry import FUSIONS, register

TERM_CHOICES = ("key,value", "key", "value", "none")


def terms_option(what: str) -> Any:
    """The ``--{scheme}-terms`` ablation option: which of the key/value tables to use."""
    return option("key,value", f"which of {what} to use (ablations, Omote et al. Table 3)",
                  Choice(TERM_CHOICES))


@dataclass
class ShawOptions:
    rel_k: int = option(2, "rel: maximum relative distance k (Eq. 15)",     # Omote §5.1: k = 2
                        IntRange(min=0))
    rel_terms: str = terms_option("rel's a^K (key) / a^V (value)")


@dataclass
class DepOptions(SubwordTreeOptions):
    dep_l: int = option(2, "dep: maximum relative depth l (Eqs. 19–20)",   # Omote §5.1: l = 2
                        IntRange(min=0))
    dep_terms: str = terms_option("dep's b^K / b^V")


@dataclass
class DepLabelOptions(SubwordTreeOptions):
    deplabel_k: int = option(2, "deplabel: ancestor/descendant labels with |label| > k get a "
                             "zero vector", IntRange(min=0))
    deplabel_terms: str = terms_option("deplabel's b^K / b^V")


@dataclass
class DepLabelRelOptions(DepLabelOptions, ShawOptions):
    """``deplabel_rel``: the options of ``deplabel`` and of ``rel``."""


# -- labels -----------------------------------------------------------------------------------

def distance_labels(dist: Tensor, k: int) -> Tensor:
    """``clip(dist, k) + k + 1`` (Eq. 15), so that 0 stays free for "no term"."""
    return dist.clamp(-k, k) + k + 1


def shaw_labels(q_pos: Tensor, k_pos: Tensor, k: int) -> Tensor:
    """Shaw's labels of clip(j − i, k) (Eqs. 13–14) from absolute positions: ``[Tq, Tk]``."""
    return distance_labels(k_pos[None, :] - q_pos[:, None], k)


def dep_labels(heads: list[int], l: int) -> Tensor:
    """Omote's labels of clip(dist_ij, l) (Eqs. 16, 19–20): ``[n, n]``."""
    return distance_labels(relative_depth(heads), l)


def deplabel_labels(heads: list[int], k: int) -> Tensor:
    """The Japanese paper's labels (ja §3.1–3.2): ``[n, n]``, see the module docstring."""
    dist, relation = relative_depth(heads), pair_relations(heads)
    labels = distance_labels(dist, k)           # ancestor/descendant, and self (dist 0)
    labels[relation == SIB] = 2 * k + 2
    labels[(relation == NON_DEP) | ((relation == LINEAL) & (dist.abs() > k))] = 0
    return labels


def with_special_tokens(labels: Tensor, length: int, rows: int) -> Tensor:
    """Subword labels ``[S, S]`` -> ``[length, length]`` for ``length`` source ids (the subwords
    the ids keep, then EOS), EOS row and column 0, stored compactly (``rows`` labels)."""
    n = min(labels.shape[0], length - 1)
    out = torch.zeros(length, length, dtype=torch.uint8 if rows <= 256 else torch.int16)
    out[:n, :n] = labels[:n, :n]
    return out


def subword_depth(view: SubwordTree, length: int) -> Tensor:
    """``[length]`` int16 for ``length`` source ids (the subwords ``view`` keeps, then EOS):
    the depth + 1 of each subword's node, 0 for EOS (and the subwords cut off)."""
    node_depth = torch.tensor(depths(view.heads), dtype=torch.long)
    out = torch.zeros(length, dtype=torch.int16)
    n = min(len(view.node), length - 1)
    out[:n] = (node_depth[torch.tensor(view.node, dtype=torch.long)] + 1)[:n].to(torch.int16)
    return out


def depth_factors(depth: Tensor, values: Tensor, l: int) -> LabelFactors:
    """``dep``'s labels as per-token classes: ``depth [B, S]`` (depth + 1, 0 = none) for both
    sides, ``values [W]`` the depths ``0 … W − 1`` the batch may hold; the table's label of
    depths ``(u, w)`` is Eq. 20's ``clip(w − u, l) + l + 1``, 0 where either is 0."""
    u, w = values.long()[:, None], values.long()[None, :]
    table = distance_labels(w - u, l) * ((u > 0) & (w > 0))
    return LabelFactors(depth.long(), depth.long(), table)


def term_set(spec: str) -> set[str]:
    """``"key,value"`` -> ``{"key", "value"}``; ``"none"`` -> empty."""
    return set() if spec == "none" else set(spec.split(","))


# -- parameters -------------------------------------------------------------------------------

def with_zero_row(rows: Tensor | None) -> Tensor | None:
    """Learned rows ``[R − 1, d_k]`` -> a table ``[R, d_k]`` whose row 0 ("no term") is zero."""
    return None if rows is None else torch.cat([rows.new_zeros(1, rows.shape[-1]), rows])


def _table(layers: int, rows: int, d_k: int, used: bool) -> nn.Parameter | None:
    return nn.Parameter(torch.randn(layers, rows - 1, d_k) * d_k ** -0.5) if used else None


class RelativeTables(nn.Module):
    """Per-layer key and value tables ``w^K``, ``w^V`` of ``rows`` labels (label 0 = zero)."""

    def __init__(self, layers: int, rows: int, d_k: int, terms: set[str]):
        super().__init__()
        self.key = _table(layers, rows, d_k, "key" in terms)
        self.value = _table(layers, rows, d_k, "value" in terms)
        self._derived = Derived()              # without autograd: kept per layer

    def tables(self, layer: int) -> tuple[Tensor | None, Tensor | None]:
        """``(w^K, w^V)`` of ``layer``, each ``[rows, d_k]`` or None (ablated). Without
        autograd (decoding, validation) they are built once per layer and kept while the
        parameters stay the same tensors at the same version: a search asks for them at every
        step of every layer."""
        return self._derived.get(layer, (self.key, self.value), lambda: self._build(layer))

    def _build(self, layer: int) -> tuple[Tensor | None, Tensor | None]:
        return (with_zero_row(None if self.key is None else self.key[layer]),
                with_zero_row(None if self.value is None else self.value[layer]))

    def term(self, labels: Tensor, layer: int, factors: LabelFactors | None = None,
             positions: ClippedDistance | None = None) -> AttentionTerms | None:
        """The relative term of ``labels`` (with their ``factors`` or ``positions``, if any) in
        ``layer``."""
        key, value = self.tables(layer)
        if key is None and value is None:
            return None
        return AttentionTerms([RelativeTerm(labels, key, value, factors, positions)])


class ShawModule(SchemeModule):
    """``rel``: Shaw's tables in every self-attention layer of both sides (Eqs. 11–15)."""

    def __init__(self, dims: ModelDims, k: int, terms: set[str]):
        super().__init__()
        self.k = k
        self.sides = nn.ModuleDict({
            "src": RelativeTables(dims.encoder_layers, 2 * k + 2, dims.d_k, terms),
            "tgt": RelativeTables(dims.decoder_layers, 2 * k + 2, dims.d_k, terms)})

    def attention_terms(self, side: str, layer: int, feats: dict[str, Tensor], q_pos: Tensor,
                        k_pos: Tensor) -> AttentionTerms | None:
        return self.sides[side].term(shaw_labels(q_pos, k_pos, self.k), layer,
                                     positions=ClippedDistance(q_pos, k_pos, self.k))


class TreeModule(SchemeModule):
    """``dep`` / ``deplabel``: tree tables in every encoder self-attention layer (Eqs. 17–20).
    ``depth_clip``: the labels are ``dep``'s, clipped to it, and go with their factors
    (:func:`depth_factors`) where the batch has ``dep_depth_values``."""

    def __init__(self, dims: ModelDims, feature: str, rows: int, terms: set[str],
                 depth_clip: int | None = None):
        super().__init__()
        self.feature, self.depth_clip = feature, depth_clip
        self.tables = RelativeTables(dims.encoder_layers, rows, dims.d_k, terms)

    def attention_terms(self, side: str, layer: int, feats: dict[str, Tensor], q_pos: Tensor,
                        k_pos: Tensor) -> AttentionTerms | None:
        if side != "src":
            return None
        factors = (depth_factors(feats["dep_depth"], feats["dep_depth_values"], self.depth_clip)
                   if self.depth_clip is not None and "dep_depth_values" in feats else None)
        return self.tables.term(feats[self.feature].long(), layer, factors)


def _projected(table: Tensor | None, w: Tensor) -> Tensor | None:
    return None if table is None else table @ w


class ConcatModule(SchemeModule):
    """``deplabel_rel`` (ja method 2): ``c_ij = Concat(a_ij, b_ij) W_rel`` (ja Eqs. 17–20).

    ``W_rel`` of keys (values) exists only when ``a`` or ``b`` has a key (value) table: with
    ablations (``--rel-terms key --deplabel-terms key``) a W^V_rel would get no gradient, which
    DDP (``find_unused_parameters=False``) cannot reduce. Checkpoints written with an unused
    ``W_rel`` still load: its entry is dropped (it never took part in a forward pass)."""

    def __init__(self, shaw: ShawModule, tree: TreeModule, layers: int, d_k: int):
        super().__init__()
        self.shaw, self.tree, self.d_k = shaw, tree, d_k
        src = shaw.sides["src"]
        self.w_rel = nn.ParameterDict({          # W^K_rel, W^V_rel ∈ R^{2d_k × d_k} per layer
            name: nn.Parameter(nn.init.xavier_uniform_(torch.empty(layers, 2 * d_k, d_k)))
            for name in ("key", "value")
            if getattr(src, name) is not None or getattr(tree.tables, name) is not None})

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        """Drop a saved ``W_rel`` this model does not build (see the class docstring)."""
        for name in ("key", "value"):
            if name not in self.w_rel:
                state_dict.pop(f"{prefix}w_rel.{name}", None)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def projection(self, name: str, layer: int) -> tuple[Tensor | None, Tensor | None]:
        """``(W_rel[:d_k], W_rel[d_k:])`` of ``name`` (key/value) in ``layer``, the halves
        that project ``a`` and ``b``; None where no table uses them."""
        if name not in self.w_rel:
            return None, None
        w = self.w_rel[name][layer]
        return w[:self.d_k], w[self.d_k:]

    def attention_terms(self, side: str, layer: int, feats: dict[str, Tensor], q_pos: Tensor,
                        k_pos: Tensor) -> AttentionTerms | None:
        if side != "src":
            return self.shaw.attention_terms(side, layer, feats, q_pos, k_pos)
        (wa_k, wb_k), (wa_v, wb_v) = self.projection("key", layer), self.projection("value", layer)
        a_k, a_v = self.shaw.sides["src"].tables(layer)
        b_k, b_v = self.tree.tables.tables(layer)
        # Concat(a, b) W_rel = a W_rel[:d_k] + b W_rel[d_k:]  (ja Eqs. 17–18)
        terms = [RelativeTerm(shaw_labels(q_pos, k_pos, self.shaw.k),
                              _projected(a_k, wa_k), _projected(a_v, wa_v)),
                 RelativeTerm(feats[self.tree.feature].long(),
                              _projected(b_k, wb_k), _projected(b_v, wb_v))]
        terms = [t for t in terms if t.key_table is not None or t.value_table is not None]
        return AttentionTerms(terms) if terms else None


# -- schemes ----------------------------------------------------------------------------------

@register
class Shaw(Scheme):
    name = "rel"
    help = "Shaw et al. (2018) relative positions clip(j − i, k), encoder and decoder"
    Options = ShawOptions

    prefix, clip = "rel", "k"

    def build(self, dims: ModelDims) -> SchemeModule:
        return ShawModule(dims, self.option("rel_k"), term_set(self.option("rel_terms")))

    def pair_labels(self, example: Any) -> Tensor:
        pos = torch.arange(len(example.src) - 1)
        return shaw_labels(pos, pos, self.option("rel_k"))

    def label_text(self, label: int) -> str:
        return str(label - self.option("rel_k") - 1)                   # clip(j − i, k)


class TreeScheme(Scheme):
    """A scheme whose labels come from the source tree, computed once per example.

    ``labels(heads, c)`` gives the ``[n, n]`` labels over the nodes of ``heads`` for the clip
    value ``c`` (option ``{prefix}_{clip}``): 0 = no term, ``2c + 1`` clipped distances and
    ``extra_labels`` more; ablations come from option ``{prefix}_terms``.
    """

    needs_source_trees = True
    feature: ClassVar[str]
    prefix: ClassVar[str]
    clip: ClassVar[str]
    extra_labels: ClassVar[int] = 0
    labels: ClassVar[Any]

    def clip_value(self) -> int:
        return self.option(f"{self.prefix}_{self.clip}")

    def rows(self) -> int:
        return 2 * self.clip_value() + 2 + self.extra_labels

    def source_features(self, example: Any) -> dict[str, Tensor]:
        """``{feature: [T, T]}`` labels for the ``T = len(example.src)`` source ids, and
        :meth:`view_features`."""
        with sentence_errors(example):
            view = project_tree(self.source_tree(example).heads, example.src_subwords,
                                self.option("subword_tree"), self.option("chain_head"))
        labels = view.expand(self.labels(view.heads, self.clip_value()))
        return {self.feature: with_special_tokens(labels, len(example.src), self.rows()),
                **self.view_features(view, len(example.src))}

    def view_features(self, view: SubwordTree, length: int) -> dict[str, Tensor]:
        """More per-example features from the subword tree ``view`` (none by default)."""
        return {}

    def pair_labels(self, example: Any) -> Tensor:
        """The labels of :meth:`source_features` without the EOS row and column."""
        return self.source_features(example)[self.feature][:-1, :-1].long()

    def label_text(self, label: int) -> str:
        return str(label - self.clip_value() - 1)                       # clip(dist_ij, c)

    def build(self, dims: ModelDims) -> SchemeModule:
        return TreeModule(dims, self.feature, self.rows(),
                          term_set(self.option(f"{self.prefix}_terms")))


@register
class Dep(TreeScheme):
    name = "dep"
    help = "Omote et al. (2019) relative depth on the source tree, clipped to l (encoder)"
    feature, prefix, clip, labels = "dep_labels", "dep", "l", staticmethod(dep_labels)
    Options = DepOptions

    def view_features(self, view: SubwordTree, length: int) -> dict[str, Tensor]:
        """``dep_depth [T]``: each subword's depth + 1 (0 for EOS), the labels' factors."""
        return {"dep_depth": subword_depth(view, length)}

    def batch_features(self, feats: dict[str, Tensor]) -> dict[str, Tensor]:
        """``feats`` with ``dep_depth_values [D + 1]``, the depths ``0 … D`` of the batch (its
        deepest token's depth + 1 is D), found on the host."""
        if "dep_depth" not in feats:
            return feats
        deepest = int(feats["dep_depth"].max()) if feats["dep_depth"].numel() else 0
        return {**feats, "dep_depth_values": torch.arange(deepest + 1, dtype=torch.int16)}

    def build(self, dims: ModelDims) -> SchemeModule:
        return TreeModule(dims, self.feature, self.rows(),
                          term_set(self.option(f"{self.prefix}_terms")), self.clip_value())


@register
class DepLabel(TreeScheme):
    name = "deplabel"
    help = "the Japanese paper's tree labels (ancestor depth, sib, self, non_dep), encoder"
    feature, prefix, clip, labels = "deplabel_labels", "deplabel", "k", \
        staticmethod(deplabel_labels)
    extra_labels = 1                                    # sib

    def label_text(self, label: int) -> str:
        """ja §3.1: a depth difference, ``self``, ``sib`` or ``non_dep`` (which also stands
        for the pairs beyond k: they get its zero vector)."""
        k = self.clip_value()
        return {0: "non_dep", k + 1: "self", 2 * k + 2: "sib"}.get(label, str(label - k - 1))
    Options = DepLabelOptions


@register
class DepLabelRel(DepLabel):
    name = "deplabel_rel"
    help = "the Japanese paper's method 2: Concat(a, b) W_rel of rel and deplabel"
    Options = DepLabelRelOptions

    def build(self, dims: ModelDims) -> SchemeModule:
        shaw = Shaw(rel_k=self.option("rel_k"), rel_terms=self.option("rel_terms")).build(dims)
        return ConcatModule(shaw, super().build(dims), dims.encoder_layers, dims.d_k)


FUSIONS[("deplabel", "rel")] = "deplabel_rel"

"""``pascal`` — parent-scaled self-attention (PASCAL; Bugliarello & Okazaki 2020, "Enhancing
Machine Translation with Dependency-Aware Self-Attention", ACL, §3), a baseline of the GPS
paper (Table 2).

In the chosen encoder layers, ``n`` heads of every sentence have their scaled scores multiplied
by a Gaussian centred on each token's dependency parent:

    S = Q K^T / √d_k,   N_tj = N(j | p_t, σ²) = exp(−(j − p_t)² / 2σ²) / √(2πσ²),   S̃ = S ⊙ N

and ``softmax(S̃) V`` as usual (the reference code multiplies fairseq's scaled ``attn_weights``
by ``normpdf`` in ``fairseq/modules/multihead_pascal.py`` before the masks; parameter-free).
The scale goes to attention as ``AttentionTerms.logit_scale`` ``[B, H, S, S]``: N on the chosen
heads, 1 on the others.

**Head selection, per sentence.** The chosen heads are the *last* ``--pascal-heads`` heads of
each chosen layer (H − n … H − 1), in every sentence of the batch: an explicit ``[B, H]`` head
mask. The reference code selects ``attn_weights[-n·B:]`` on fairseq's folded ``batch×heads``
axis, whose index is ``b·H + h``; that slice is all heads of the last ``n·B/H`` sentences, not
heads ``H − n … H − 1`` of every sentence, and the Gaussians it multiplies in are those of other
sentences. Here each sentence gets its own parents on its own selected heads (a test checks it
against a loop over sentences).

**Rules.**

* *Parent positions in subword coordinates* (``--pascal-parent``): ``mean`` — every subword of
  word w takes the mean position of the subwords of w's head word (the reference's
  ``bpe_tags_mean.py``, its main setting; may be fractional); ``first`` — the head word's first
  subword (``bpe_tags_root.py``). A root's parent is itself (its own subwords' mean/first
  position), as in the reference preprocessing; so is EOS's.
* *Several sentences on one line*: a word whose head lies in another parser sentence (the parse
  stage's ``parataxis`` join, ``Sentence.sent_ids``) is its sentence's root, parent = itself (the
  reference parses each sentence separately).
* *Parent ignoring* (``--pascal-parent-ignoring q``, training only, default 0 as in the
  reference's scripts): each (sentence, head, token) row is left unscaled with probability q.
* Layers are counted from 1 (``--pascal-layer 1`` = the bottom layer, the paper's and the
  reference's setting; ``all`` or e.g. ``1,2``; the 0.1.0 option ``--pascal-layers`` counted
  from 0 and still works, with a warning); ``--pascal-heads`` defaults to all heads (the reference's
  NC11 script uses 8 of 8 heads of the first layer; its WMT16 script 5 of 8).
  ``--pascal-layer-heads 8,4`` gives one count per chosen layer instead (lowest layer first; 0
  leaves a layer unscaled), as the reference's ``--encoder-pascal-heads`` list of one count per
  encoder layer (``pascal_transformer.py``): its ``8 0 0 0 0 0`` is ``--pascal-layer 1``.
* *Weighting* (``--pascal-weighting``, the reference's ``--pascal-weight-fn``): ``normal`` is
  the Gaussian above (``normpdf``); ``uniform`` is the reference's window ``unipdf``,
  ``U_tj = 1[|j − p_t| < w + 1]`` with ``w = --pascal-window`` (its ``--pascal-weight-param``),
  i.e. the scores of keys within w positions of the parent are kept and the others multiplied
  by 0 (not masked: they still take part in the softmax with score 0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from depnmt.core.errors import DepnmtError
from depnmt.core.layerlists import check_layer_list, parse_layers
from depnmt.core.subwords import word_spans
from depnmt.core.trees import sentence_heads
from depnmt.model.attention import AttentionTerms
from depnmt.model.schemes.base import ModelDims, Scheme, SchemeModule, sentence_errors
from depnmt.model.schemes.options import Choice, FloatRange, IntRange, option
from depnmt.model.schemes.registry import register

PARENT_RULES = ("mean", "first")
WEIGHTINGS = ("normal", "uniform")


def check_head_list(value: Any) -> Any:
    """The check of ``--pascal-layer-heads``: comma-separated counts ≥ 0 (their number and
    size are checked against the model by :meth:`Pascal.check`)."""
    if value is not None and not all(p.strip().isdigit() for p in str(value).split(",")):
        raise ValueError(f"'{value}': expected counts such as 8 or 8,4")
    return value


@dataclass
class PascalOptions:
    pascal_layer: str = option("1", "pascal: encoder layers with parent-scaled heads, counted "
                               "from 1 (1 = bottom), e.g. 1, 1,2 or all",
                               check=check_layer_list)
    pascal_heads: int | None = option(None, "pascal: parent-scaled heads per chosen layer (the "
                                      "last N heads) [default: all heads]",
                                      IntRange(min=1))
    pascal_sigma: float = option(1.0, "pascal: standard deviation σ of the Gaussian on the "
                                 "parent", FloatRange(min=0, min_open=True))
    pascal_parent: str = option("mean", "pascal: a subword's parent is the mean position of its "
                                "head word's subwords, or the first one",
                                Choice(PARENT_RULES))
    pascal_parent_ignoring: float = option(0.0, "pascal: probability that a token's row is left "
                                           "unscaled in training (parent ignoring)",
                                           FloatRange(0, 1))
    pascal_layer_heads: str | None = option(None, "pascal: parent-scaled heads of each chosen "
                                            "layer, lowest first, e.g. 8,4 (0: unscaled); "
                                            "overrides --pascal-heads", str,
                                            check=check_head_list)
    pascal_weighting: str = option("normal", "pascal: weight of a key around the parent: normal "
                                   "(Gaussian, --pascal-sigma) or uniform (1 within "
                                   "--pascal-window positions, else 0)",
                                   Choice(WEIGHTINGS))
    pascal_window: float = option(1.0, "pascal: uniform weighting: keys j with |j − p| < "
                                  "window + 1 keep their score", FloatRange(min=0))


def parent_positions(heads: list[int], sent_ids: list[int] | None, subwords: list[str],
                     rule: str = "mean") -> list[float]:
    """The parent position of every subword (see the module docstring), 0-based."""
    spans = word_spans(list(subwords))
    if len(spans) != len(heads):
        raise ValueError(f"{len(spans)} words in the subwords but {len(heads)} in the tree")
    if rule not in PARENT_RULES:
        raise ValueError(f"parent rule must be one of {PARENT_RULES}, not {rule!r}")
    where = [(start + end - 1) / 2 if rule == "mean" else float(start) for start, end in spans]
    out: list[float] = []
    for w, head in enumerate(sentence_heads(heads, sent_ids)):
        start, end = spans[w]
        out += [where[head - 1 if head else w]] * (end - start)
    return out


def gaussian(parent: Tensor, positions: Tensor, sigma: float) -> Tensor:
    """``N(j | p_t, σ²)`` for parents ``[B, Tq]`` and key positions ``[Tk]``: ``[B, Tq, Tk]``."""
    var = sigma * sigma
    dist = positions.to(parent.dtype)[None, None, :] - parent[:, :, None]
    return torch.exp(-dist * dist / (2 * var)) / math.sqrt(2 * math.pi * var)


def uniform(parent: Tensor, positions: Tensor, window: float) -> Tensor:
    """``1[|j − p_t| < w + 1]`` for parents ``[B, Tq]`` and key positions ``[Tk]``:
    ``[B, Tq, Tk]`` (the reference's ``unipdf``)."""
    dist = positions.to(parent.dtype)[None, None, :] - parent[:, :, None]
    return (dist.abs() < window + 1).to(parent.dtype)


def parent_scale(parent: Tensor, positions: Tensor, weighting: str, sigma: float,
                 window: float) -> Tensor:
    """``[B, Tq, Tk]``: the Gaussian (``normal``) or the window (``uniform``) around each
    query's parent (parents ``[B, Tq]``, key positions ``[Tk]``)."""
    if weighting == "uniform":
        return uniform(parent, positions, window)
    return gaussian(parent, positions, sigma)


class PascalModule(SchemeModule):
    """The parent-centred scale of the selected heads of the selected encoder layers."""

    def __init__(self, dims: ModelDims, layer_heads: dict[int, int], sigma: float,
                 ignoring: float, weighting: str = "normal", window: float = 1.0):
        super().__init__()
        self.layers = [layer for layer, n in layer_heads.items() if n > 0]
        self.sigma, self.ignoring, self.weighting, self.window = sigma, ignoring, weighting, window
        chosen = torch.zeros(dims.encoder_layers, dims.n_heads, dtype=torch.bool)
        for layer, n in layer_heads.items():
            chosen[layer, dims.n_heads - n:] = n > 0               # heads H − n … H − 1
        self.register_buffer("chosen", chosen, persistent=False)

    def weights(self, parent: Tensor, positions: Tensor) -> Tensor:
        """``[B, Tq, Tk]``: :func:`parent_scale` with this module's options."""
        return parent_scale(parent, positions, self.weighting, self.sigma, self.window)

    def head_mask(self, layer: int, batch: int, length: int) -> Tensor:
        """``[B, H, Tq, 1]`` bool: where the weights apply (per sentence, head and token)."""
        mask = self.chosen[layer].view(1, -1, 1, 1).expand(batch, -1, length, 1)
        if self.training and self.ignoring > 0:                    # parent ignoring
            keep = torch.rand(mask.shape, device=mask.device) >= self.ignoring
            mask = mask & keep
        return mask

    def attention_terms(self, side: str, layer: int, feats: dict[str, Tensor], q_pos: Tensor,
                        k_pos: Tensor) -> AttentionTerms | None:
        if side != "src" or layer not in self.layers:
            return None
        parent = feats["pascal_parent"]                              # (B, S) float
        scale = self.weights(parent, k_pos).unsqueeze(1)             # (B, 1, S, S)
        mask = self.head_mask(layer, parent.shape[0], parent.shape[1])   # (B, H, S, 1)
        return AttentionTerms([], logit_scale=torch.where(mask, scale, scale.new_ones(())))


@register
class Pascal(Scheme):
    name = "pascal"
    help = "PASCAL (Bugliarello & Okazaki 2020): heads scaled by a Gaussian on the parent"
    needs_source_trees = True
    Options = PascalOptions

    def layer_heads(self, dims: ModelDims) -> dict[int, int]:
        """Chosen encoder layer -> its number of parent-scaled heads (a DepnmtError when the
        counts do not fit the layers or the heads)."""
        layers = parse_layers(self.option("pascal_layer"), dims.encoder_layers, "--pascal-layer")
        listed = self.option("pascal_layer_heads")
        if listed is None:
            counts = [self.option("pascal_heads") or dims.n_heads] * len(layers)
        else:
            counts = [int(part) for part in str(listed).split(",")]
            if len(counts) != len(layers):
                raise DepnmtError(f"--pascal-layer-heads {listed}: {len(counts)} counts for the "
                                  f"{len(layers)} layer(s) of --pascal-layer "
                                  f"{self.option('pascal_layer')}")
        for n in counts:
            if n > dims.n_heads:
                raise DepnmtError(f"pascal: {n} parent-scaled heads exceed the {dims.n_heads} "
                                  f"attention heads (--pascal-heads/--pascal-layer-heads)")
        return dict(zip(layers, counts))

    def check(self, dims: ModelDims) -> None:
        self.layer_heads(dims)

    def source_features(self, example: Any) -> dict[str, Tensor]:
        """``pascal_parent [T]``: each source id's parent position (EOS: itself)."""
        tree = self.source_tree(example)
        with sentence_errors(example):
            parents = parent_positions(list(tree.heads), tree.sent_ids, example.src_subwords,
                                       self.option("pascal_parent"))
        n = len(example.src) - 1
        return {"pascal_parent": torch.tensor(parents[:n] + [float(n)], dtype=torch.float32)}

    def pair_labels(self, example: Any) -> Tensor:
        """``[n, n]`` the scale each query t puts on key j (Gaussian or window around t's
        parent, :meth:`PascalModule.weights`) over the ``n`` source tokens (``depnmt
        inspect``: what the chosen heads multiply their scores by)."""
        parent = self.source_features(example)["pascal_parent"][:-1]
        return parent_scale(parent[None], torch.arange(len(parent)),
                            self.option("pascal_weighting"), float(self.option("pascal_sigma")),
                            float(self.option("pascal_window")))[0]

    def label_text(self, label: float) -> str:
        return f"{label:.2f}"

    def build(self, dims: ModelDims) -> SchemeModule:
        return PascalModule(dims, self.layer_heads(dims), float(self.option("pascal_sigma")),
                            float(self.option("pascal_parent_ignoring")),
                            self.option("pascal_weighting"), float(self.option("pascal_window")))

"""The positional-scheme seam.

A scheme has two halves:

* :class:`Scheme` — plain configuration and tree featurisation. It says which trees it needs and
  turns one example's tree into tensors (``source_features``; ``target_features`` for schemes
  supervised by target trees), computed once when data is loaded, padded by
  :func:`pad_features` in the collate step. No parameters, picklable.
* :class:`SchemeModule` — the ``nn.Module`` it builds: an additive term for the embeddings
  (``embed``) and/or :class:`~depnmt.model.attention.AttentionTerms` for self-attention layers
  (relative terms, logit biases, or whole heads it computes itself: ``HeadOverride``).

Three optional hooks serve schemes that *learn* from trees instead of reading them (DBSA):

* ``auxiliary_losses`` — losses of the last teacher-forced forward pass, each with its weight λ;
  the training loop minimises ``token loss + Σ λ · loss`` (translate never asks for them);
* ``validation_counts`` — ``(correct, total)`` counts over a dev batch (e.g. UAS), which the
  training loop sums, prints and logs to ``metrics.jsonl`` as ``dev_{name}`` percentages;
* ``induced_source_trees`` — word trees of the sources of the last ``encode`` (``depnmt
  translate --induced-trees``).

A module may keep what these hooks need (e.g. attention distributions) from its last forward
pass; they are called right after it.

Which trees a scheme needs: ``needs_source_trees`` — the model reads source trees (training
*and* translate, which then runs the parser); ``trains_on_source_trees`` — only training reads
them (supervision; translate needs no parser); ``needs_target_trees`` — training reads
``{split}.{tgt_lang}.conllu`` and calls ``target_features``.

The training loop, the batcher and ``translate`` only see a :class:`SchemeStack` (the schemes of
one model, e.g. ``abs`` + ``dep`` + ``rel``), never a particular paper.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from ..attention import AttentionTerms
from .options import NoOptions, make_options


@dataclass
class ModelDims:
    """What a scheme module needs to know about the Transformer it plugs into."""

    d_model: int
    n_heads: int
    encoder_layers: int
    decoder_layers: int

    @property
    def d_k(self) -> int:
        return self.d_model // self.n_heads


@dataclass
class AuxiliaryLoss:
    """A scheme's extra training loss: ``value`` is a mean per supervised item (a scalar
    tensor); the training loop adds ``weight · value`` per target token (``weight`` = λ; 0 adds
    nothing at all)."""

    value: Tensor
    weight: float


class SchemeModule(nn.Module):
    """Parameters and per-forward terms of one scheme. Defaults add nothing."""

    def embed(self, x: Tensor, side: str, positions: Tensor, feats: dict[str, Tensor]) -> Tensor:
        """Add this scheme's term to embeddings ``x [B, T, D]``; ``positions [T]`` are absolute
        (0-based) positions, which differ from ``arange(T)`` during incremental decoding."""
        return x

    def attention_terms(self, side: str, layer: int, feats: dict[str, Tensor], q_pos: Tensor,
                        k_pos: Tensor) -> AttentionTerms | None:
        """Terms for self-attention of ``side`` ("src" or "tgt") in ``layer`` (0-based);
        ``q_pos [Tq]`` / ``k_pos [Tk]`` are absolute positions of queries and keys."""
        return None

    def auxiliary_losses(self, src_feats: dict[str, Tensor],
                         tgt_feats: dict[str, Tensor]) -> dict[str, AuxiliaryLoss]:
        """Extra losses of the last teacher-forced forward pass, by name."""
        return {}

    def validation_counts(self, src_feats: dict[str, Tensor],
                          tgt_feats: dict[str, Tensor]) -> dict[str, tuple[int, int]]:
        """``{name: (correct, total)}`` of the last teacher-forced forward pass (dev metrics)."""
        return {}

    def induced_source_trees(self, examples: list[Any]) -> list[Any] | None:
        """Word trees (:class:`depnmt.parse.Sentence`) the model induced for the sources of the
        last ``encode`` of ``examples`` (in batch order); None if this scheme induces none."""
        return None


class Scheme:
    """A registered positional scheme: its options, tree needs, featurisation, module factory.

    ``Options`` is the dataclass of the scheme's options (:mod:`.options`: the ``depnmt
    train`` flags are generated from it, and the model config records an instance of it).
    """

    name: ClassVar[str]
    help: ClassVar[str] = ""                        # one line of `depnmt train --help`
    Options: ClassVar[type] = NoOptions
    needs_source_trees: ClassVar[bool] = False      # the model reads them (train + translate)
    trains_on_source_trees: ClassVar[bool] = False  # only training reads them (supervision)
    needs_target_trees: ClassVar[bool] = False      # training reads them (target_features)

    def __init__(self, **options: Any):
        self.options = make_options(self.Options, options)

    def option(self, name: str) -> Any:
        """The value of option ``name`` (a field of ``Options``)."""
        return getattr(self.options, name)

    def learn_options(self, examples: list[Any]) -> dict[str, Any]:
        """Options learned from the training examples (trees attached) before any features are
        computed, e.g. a label vocabulary (GPS: a :func:`~.options.learned` field). Training
        records them in the model config before it builds the model, so translate builds the
        same scheme; return ``{}`` when the options already hold them (``--resume`` keeps the
        saved ones)."""
        return {}

    def source_features(self, example: Any) -> dict[str, Tensor]:
        """Per-example source tensors whose dims equal the source length (incl. EOS)."""
        return {}

    def target_features(self, example: Any) -> dict[str, Tensor]:
        """Per-example target tensors whose dims equal the decoder input length ``len(tgt) + 1``
        (BOS + target), from ``example.tgt_tree`` (only called when training)."""
        return {}

    def pair_labels(self, example: Any) -> Tensor | None:
        """``[n, n]`` per-pair labels (table rows) over the ``n = len(example.src) − 1`` source
        tokens, for relative schemes (``depnmt inspect`` prints them); None for others."""
        return None

    def label_text(self, label: int) -> str:
        """What a label of :meth:`pair_labels` means in the paper's terms (e.g. a distance)."""
        return str(label)

    def check(self, dims: ModelDims) -> None:
        """Raise :class:`~depnmt.errors.DepnmtError` if the options do not fit the model (called
        before data is loaded)."""

    def build(self, dims: ModelDims) -> SchemeModule:
        return SchemeModule()


def pad_features(feats: list[dict[str, Tensor]], length: int) -> dict[str, Tensor]:
    """Stack per-example feature tensors, zero-padding every dim to ``length``.

    A ``[T]`` feature becomes ``[B, length]``, a ``[T, T]`` one ``[B, length, length]``; zero is
    every scheme's "no term / padding" value.
    """
    if not feats or not feats[0]:
        return {}
    out = {}
    for key in feats[0]:
        first = feats[0][key]
        batch = first.new_zeros((len(feats),) + (length,) * first.dim())
        for i, f in enumerate(feats):
            t = f[key]
            batch[(i,) + tuple(slice(0, s) for s in t.shape)] = t
        out[key] = batch
    return out


class SchemeStack(nn.Module):
    """The schemes of one model, applied in order (embedding terms) and merged (attention)."""

    def __init__(self, schemes: list[Scheme], dims: ModelDims):
        super().__init__()
        self.schemes = schemes
        self.parts = nn.ModuleList(s.build(dims) for s in schemes)

    @property
    def needs_source_trees(self) -> bool:
        return any(s.needs_source_trees for s in self.schemes)

    def auxiliary_losses(self, src_feats: dict[str, Tensor],
                         tgt_feats: dict[str, Tensor]) -> dict[str, AuxiliaryLoss]:
        return {k: v for p in self.parts for k, v in p.auxiliary_losses(src_feats, tgt_feats).items()}

    def validation_counts(self, src_feats: dict[str, Tensor],
                          tgt_feats: dict[str, Tensor]) -> dict[str, tuple[int, int]]:
        return {k: v for p in self.parts
                for k, v in p.validation_counts(src_feats, tgt_feats).items()}

    def induced_source_trees(self, examples: list[Any]) -> list[Any] | None:
        """The first part's induced source trees (see :meth:`SchemeModule.induced_source_trees`)."""
        for part in self.parts:
            trees = part.induced_source_trees(examples)
            if trees is not None:
                return trees
        return None

    def embed(self, x: Tensor, side: str, positions: Tensor, feats: dict[str, Tensor]) -> Tensor:
        for part in self.parts:
            x = part.embed(x, side, positions, feats)
        return x

    def attention_terms(self, side: str, layer: int, feats: dict[str, Tensor], q_pos: Tensor,
                        k_pos: Tensor) -> AttentionTerms | None:
        return AttentionTerms.merge([p.attention_terms(side, layer, feats, q_pos, k_pos)
                                     for p in self.parts])


def positions(length: int, offset: int = 0, device: torch.device | None = None) -> Tensor:
    """Absolute positions ``[length]`` starting at ``offset``."""
    return torch.arange(offset, offset + length, device=device)

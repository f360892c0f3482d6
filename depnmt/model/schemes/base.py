"""The positional-scheme seam.

A scheme has two halves:

* :class:`Scheme` — plain configuration and tree featurisation. It says which trees it needs and
  turns one example's tree into tensors (``source_features``; ``target_features`` for schemes
  supervised by target trees), computed once when data is loaded, padded by
  :func:`pad_features` in the collate step, where ``batch_features`` may add what it derives
  from the whole batch on the host (GPS's distinct root paths). No parameters, picklable.
* :class:`SchemeModule` — the ``nn.Module`` it builds: an additive term for the embeddings
  (``embed``) and/or :class:`~depnmt.model.attention.AttentionTerms` for self-attention layers
  (relative terms, logit biases, or whole heads it computes itself: ``HeadOverride``).

A module keeps nothing between calls. What a forward pass computes besides the logits is
*returned*: ``TransformerNMT.forward`` gives ``(logits, extras)`` (nanoGPT's ``(logits, loss)``),
an :class:`Extras` record holding the scores of the heads schemes compute themselves (DBSA's
parse distributions, by name) and the auxiliary losses. Tensors that every layer of one pass
shares (GPS's path embeddings) are computed by ``prepare_features`` at the start of the pass
and handed to ``embed`` / ``attention_terms`` with the batch's features.

Three optional hooks read a pass's :class:`Extras`, for schemes that *learn* from trees instead
of reading them (DBSA):

* ``auxiliary_losses`` — extra losses, each with its weight λ; ``forward`` computes them when
  given the target features (training), and the training loop minimises
  ``token loss + Σ λ · loss``;
* ``validation_counts`` — ``(correct, total)`` counts over a dev batch (e.g. UAS), which the
  training loop sums, prints and logs to ``metrics.jsonl`` as ``dev_{name}`` percentages;
* ``induced_source_trees`` — word trees of the sources of an ``encode`` (``depnmt translate
  --induced-trees``).

Which trees a scheme needs: ``needs_source_trees`` — the model reads source trees (training
*and* translate, which then runs the parser); ``trains_on_source_trees`` — only training reads
them (supervision; translate needs no parser); ``needs_target_trees`` — training reads
``{split}.{tgt_lang}.conllu`` and calls ``target_features``.

The training loop, the batcher and ``translate`` only see a :class:`SchemeStack` (the schemes of
one model, e.g. ``abs`` + ``dep`` + ``rel``), never a particular paper.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterable, Iterator

import torch
from torch import Tensor, nn

from depnmt.core.conllu import sentence_error
from depnmt.core.errors import DepnmtError
from depnmt.model.attention import AttentionTerms
from depnmt.model.schemes.options import NoOptions, make_options


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


@dataclass
class Extras:
    """What one forward pass computed besides the logits (returned, never kept on a module).

    ``scores``: what the heads schemes compute themselves report, by name (DBSA: ``parse_enc``,
    ``parse_dec``, log A_parse ``[B, T, T]``), filled by the passes that are given this record;
    ``losses``: the schemes' auxiliary losses, computed from them by a teacher-forced
    ``forward`` given the target features.
    """

    scores: dict[str, Tensor] = field(default_factory=dict)
    losses: dict[str, AuxiliaryLoss] = field(default_factory=dict)


class SchemeModule(nn.Module):
    """Parameters and per-forward terms of one scheme. Defaults add nothing."""

    def prepare_features(self, side: str, feats: dict[str, Tensor]) -> dict[str, Tensor]:
        """Tensors computed once per pass of ``side`` from the batch's features and shared by
        its layers (added to the features ``embed`` and ``attention_terms`` receive)."""
        return {}

    def embed(self, x: Tensor, side: str, positions: Tensor, feats: dict[str, Tensor]) -> Tensor:
        """Add this scheme's term to embeddings ``x [B, T, D]``; ``positions [T]`` are absolute
        (0-based) positions, which differ from ``arange(T)`` during incremental decoding."""
        return x

    def attention_terms(self, side: str, layer: int, feats: dict[str, Tensor], q_pos: Tensor,
                        k_pos: Tensor) -> AttentionTerms | None:
        """Terms for self-attention of ``side`` ("src" or "tgt") in ``layer`` (0-based);
        ``q_pos [Tq]`` / ``k_pos [Tk]`` are absolute positions of queries and keys."""
        return None

    def auxiliary_losses(self, extras: Extras, src_feats: dict[str, Tensor],
                         tgt_feats: dict[str, Tensor]) -> dict[str, AuxiliaryLoss]:
        """Extra losses of the teacher-forced pass that returned ``extras``, by name."""
        return {}

    def validation_counts(self, extras: Extras, src_feats: dict[str, Tensor],
                          tgt_feats: dict[str, Tensor]) -> dict[str, tuple[int, int]]:
        """``{name: (correct, total)}`` of the teacher-forced pass that returned ``extras``
        (dev metrics)."""
        return {}

    def induced_source_trees(self, extras: Extras, examples: list[Any]) -> list[Any] | None:
        """Word trees (:class:`depnmt.stages.parse.Sentence`) the model induced for the sources of
        the
        ``encode`` of ``examples`` (in batch order) that filled ``extras``; None if this scheme
        induces none."""
        return None

    def induced_target_trees(self, extras: Extras,
                             subwords: list[list[str]]) -> list[Any] | None:
        """Word trees induced for target sequences (``subwords``, one list per batch row, no
        BOS/EOS) by a teacher-forced pass over ``[BOS] + subwords`` that filled ``extras``;
        None if this scheme induces none."""
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

    def source_tree(self, example: Any) -> Any:
        """``example.src_tree`` (:class:`depnmt.stages.parse.Sentence`); a DepnmtError naming the
        sentence when it has none (for schemes that ``needs_source_trees``)."""
        if example.src_tree is None:
            raise DepnmtError(f"scheme '{self.name}' needs source trees, but sentence "
                              f"{example.index + 1} has none")
        return example.src_tree

    def learn_options(self, trees: Iterable[Any]) -> dict[str, Any]:
        """Options learned from the training corpus's source trees before any features are
        computed, e.g. a label vocabulary (GPS: a :func:`~.options.learned` field); ``trees``:
        the corpus's :class:`~depnmt.core.wordtable.WordTable` pieces (iterate them once, adding
        up counts). Training records them in the model config before it builds the model, so
        translate builds the same scheme; return ``{}`` when the options already hold them
        (``--resume`` keeps the saved ones)."""
        return {}

    def source_features(self, example: Any) -> dict[str, Tensor]:
        """Per-example source tensors whose dims equal the source length (incl. EOS)."""
        return {}

    def target_features(self, example: Any) -> dict[str, Tensor]:
        """Per-example target tensors whose dims equal the decoder input length ``len(tgt) + 1``
        (BOS + target), from ``example.tgt_tree`` (only called when training)."""
        return {}

    def batch_features(self, feats: dict[str, Tensor]) -> dict[str, Tensor]:
        """The padded source features of a batch (``[B, S, …]``, on the host: what
        :func:`pad_features` made of every scheme's ``source_features``) with what this scheme
        derives from the whole batch added. The collate step calls it, so that the model does
        not compute on the device what has data-dependent sizes (GPS: the batch's distinct root
        paths; reading such sizes back would make every step wait for the GPU). Default:
        ``feats`` unchanged."""
        return feats

    def pair_labels(self, example: Any) -> Tensor | None:
        """``[n, n]`` per-pair labels (table rows) over the ``n = len(example.src) − 1`` source
        tokens, for relative schemes (``depnmt inspect`` prints them); None for others."""
        return None

    def label_text(self, label: int) -> str:
        """What a label of :meth:`pair_labels` means in the paper's terms (e.g. a distance)."""
        return str(label)

    def check(self, dims: ModelDims) -> None:
        """Raise :class:`~depnmt.core.errors.DepnmtError` if the options do not fit the model
        (called
        before data is loaded)."""

    def build(self, dims: ModelDims) -> SchemeModule:
        return SchemeModule()


@contextmanager
def sentence_errors(example: Any) -> Iterator[None]:
    """Turn a ValueError of the tree functions (a tree that does not fit the subwords) into a
    DepnmtError naming ``example``'s sentence: its file and line for a tree read from CoNLL-U
    (:func:`~depnmt.core.conllu.sentence_error`)."""
    try:
        yield
    except ValueError as exc:
        raise sentence_error(example.src_tree, example.index + 1, str(exc)) from None


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

    def prepare_features(self, side: str, feats: dict[str, Tensor]) -> dict[str, Tensor]:
        """``feats`` with every part's per-pass tensors added (see
        :meth:`SchemeModule.prepare_features`)."""
        out = dict(feats)
        for part in self.parts:
            out.update(part.prepare_features(side, feats))
        return out

    def auxiliary_losses(self, extras: Extras, src_feats: dict[str, Tensor],
                         tgt_feats: dict[str, Tensor]) -> dict[str, AuxiliaryLoss]:
        return {k: v for p in self.parts
                for k, v in p.auxiliary_losses(extras, src_feats, tgt_feats).items()}

    def validation_counts(self, extras: Extras, src_feats: dict[str, Tensor],
                          tgt_feats: dict[str, Tensor]) -> dict[str, tuple[int, int]]:
        return {k: v for p in self.parts
                for k, v in p.validation_counts(extras, src_feats, tgt_feats).items()}

    def induced_source_trees(self, extras: Extras, examples: list[Any]) -> list[Any] | None:
        """The first part's induced source trees (see :meth:`SchemeModule.induced_source_trees`)."""
        return self._first_trees("induced_source_trees", extras, examples)

    def induced_target_trees(self, extras: Extras,
                             subwords: list[list[str]]) -> list[Any] | None:
        """The first part's induced target trees (see :meth:`SchemeModule.induced_target_trees`)."""
        return self._first_trees("induced_target_trees", extras, subwords)

    def _first_trees(self, method: str, extras: Extras, rows: list[Any]) -> list[Any] | None:
        for part in self.parts:
            trees = getattr(part, method)(extras, rows)
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


def masked_sum(values: Tensor, keep: Tensor) -> Tensor:
    """The sum of ``values`` where ``keep`` (bool, same shape) is True: zeroed, not selected
    (boolean indexing waits for the device to count the selected entries)."""
    return torch.where(keep, values, values.new_zeros(())).sum()

"""Ensembles: several models translating together (``depnmt translate -m A -m B``,
``depnmt.Translator.load([A, B])``).

At every step of the search the ensemble's next-token distribution is the mean of the members'
log-probabilities, normalised again,

    log p(y | y_<t, x) = log softmax_y ( (1/M) Σ_m log p_m(y | y_<t, x) ),

a product of experts (OpenNMT-py and Marian average the log-probabilities too; fairseq averages
the probabilities). Greedy and beam search, n-best lists and their scores work on it as on one
model's distribution. Forced scoring (``depnmt rescore -m A -m B``, :mod:`depnmt.decoding.forced`)
scores a given translation under the same distribution, by one teacher-forced pass of each
member (:meth:`Ensemble.teacher_forced`), so the score of a hypothesis the ensemble's beam found
is the score its search gave it.

Each member keeps its own scheme: its own source features (its trees under the control it was
trained on, its learned label tables) and its own decoder state. The members must produce and
read the same token sequences, so they must share their source and target vocabularies, BPE
and tokenizers (models trained on one bpe folder do); members that read source trees must share
the parser (up to their controls): the input is parsed once and each member applies its own
control to the trees. Every member truncates the input at the smallest of their source
limits. Inducing trees (``--induced-trees``, ``--induced-target-trees``) and
``--dbsa-gold-arcs`` are for one model.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterable, Sequence

import torch
from torch import Tensor

from depnmt.core.errors import DepnmtError
from depnmt.data.batches import Batch, Example
from depnmt.decoding.translate import Translator, source_parser
from depnmt.model.transformer import DecoderState, TransformerNMT

NO_TREES = ("an ensemble induces no trees and takes no gold arcs: use --induced-trees, "
            "--induced-target-trees and --dbsa-gold-arcs with one model (-m)")


class EnsembleState:
    """The members' decoder states, whose rows are selected together."""

    def __init__(self, states: list[DecoderState]):
        self.states = states

    def reorder(self, index: Tensor) -> None:
        for state in self.states:
            state.reorder(index)

    def reorder_targets(self, index: Tensor) -> None:
        for state in self.states:
            state.reorder_targets(index)


class Ensemble:
    """Several :class:`TransformerNMT` as one :class:`~depnmt.decoding.search.Decoder`: its source
    features are a list, each member's own."""

    def __init__(self, models: Sequence[TransformerNMT]):
        self.models = list(models)

    def search_state(self, src: Tensor, src_feats: list[dict[str, Tensor]],
                     extras=None) -> EnsembleState:
        """Each member's state for ``src [B, S]`` with its own features."""
        if extras is not None:
            raise DepnmtError(NO_TREES)
        return EnsembleState([model.search_state(src, feats)
                              for model, feats in zip(self.models, src_feats)])

    def decode(self, tgt_in: Tensor, state: EnsembleState, incremental: bool = False) -> Tensor:
        """The mean of the members' log-probabilities ``[B, T, V]`` (float32) for ``tgt_in
        [B, T]``; the search normalises it."""
        return mean_log_probs(model.decode(tgt_in, member_state, incremental=incremental)
                              for model, member_state in zip(self.models, state.states))

    def teacher_forced(self, src: Tensor, src_feats: list[dict[str, Tensor]],
                       tgt_in: Tensor) -> Tensor:
        """The mean of the members' log-probabilities ``[B, T, V]`` (float32) of one
        teacher-forced pass over ``tgt_in [B, T]`` (each member with its own features), what
        :meth:`decode` gives step by step; its log-softmax is the ensemble's distribution."""
        return mean_log_probs(model(src, tgt_in, feats)[0]
                              for model, feats in zip(self.models, src_feats))


def mean_log_probs(member_logits: Iterable[Tensor]) -> Tensor:
    """``(1/M) Σ_m log_softmax(logits_m)`` in float32, of the members' logits ``[B, T, V]``."""
    total, count = None, 0
    for logits in member_logits:
        lprobs = torch.log_softmax(logits.float(), dim=-1)
        total = lprobs if total is None else total + lprobs
        count += 1
    return total / count


@dataclass
class EnsembleExample:
    """One source sentence as each member reads it (``src``: the ids, the same for all)."""

    src: list[int]
    members: list[Example]

    @property
    def tgt(self) -> list[int]:
        """The target ids (forced scoring), the same in every member's example."""
        return self.members[0].tgt

    @tgt.setter
    def tgt(self, ids: Sequence[int]) -> None:
        for member in self.members:
            member.tgt = list(ids)


class EnsembleTranslator(Translator):
    """Translators of several model folders decoding as one :class:`Ensemble`: raw text in, raw
    text out, as :class:`~depnmt.decoding.translate.Translator`; the search settings, batching,
    device and
    precision are the first member's (each member was loaded with the same options)."""

    def __init__(self, members: Sequence[Translator], names: Sequence[str]):
        if len(members) < 2:
            raise DepnmtError("an ensemble needs two or more models")
        check_members(members, names)
        first = members[0]
        self.members = list(members)
        self.model = Ensemble([m.model for m in members])
        self.config = first.config
        self.src_vocab, self.tgt_vocab, self.segmenter = (first.src_vocab, first.tgt_vocab,
                                                          first.segmenter)
        self.device, self.search_cfg, self.amp = first.device, first.search_cfg, first.amp
        self.max_tokens, self.batch_size = first.max_tokens, first.batch_size
        self.src_tokenizer, self.tgt_tokenizer = first.src_tokenizer, first.tgt_tokenizer
        self.schemes = []
        self.needs_trees = any(m.needs_trees for m in members)
        self.max_src_len = min(m.max_src_len for m in members)
        for member in members:
            member.max_src_len = self.max_src_len
        self.control = None
        self.task_tags = first.task_tags          # the members' (check_members)
        self._parser = None
        readers = [m for m in members if m.needs_trees]
        self._parser_settings = plain_settings(readers[0]) if readers else None

    @classmethod
    def from_model_dirs(cls, model_dirs: Sequence[Path], checkpoints: Sequence[Path | None],
                        device: str = "auto", precision: str = "auto",
                        max_tokens: int | None = None, batch_size: int = 0,
                        quantize: str = "none", **search_overrides) -> "EnsembleTranslator":
        """Each model folder loaded as :meth:`Translator.from_model_dir` does, with its
        checkpoint (None: its default) and the same options."""
        members = [Translator.from_model_dir(d, ckpt, device, precision, max_tokens=max_tokens,
                                             batch_size=batch_size, quantize=quantize,
                                             **search_overrides)
                   for d, ckpt in zip(model_dirs, checkpoints)]
        return cls(members, [str(d) for d in model_dirs])

    def use_gold_arcs(self) -> None:
        raise DepnmtError(NO_TREES)

    @property
    def parser(self):
        """The members' source parser without any control (each member applies its own)."""
        if self._parser is None:
            self._parser = source_parser(self._parser_settings)
        return self._parser

    def examples(self, words: Sequence[list[str]], trees: Sequence | None = None,
                 line_numbers: Sequence[int] | None = None,
                 quiet: bool = False) -> list[EnsembleExample]:
        """Each member's examples of tokenized sentences, the input parsed once (or ``trees``,
        the parser's, given) and each member's control applied to its copy."""
        self.check_source(words, line_numbers)
        if self.needs_trees and trees is None:
            trees = self.parse_words(words, line_numbers)
        per_member = [member.examples(words, list(trees) if trees is not None else None,
                                      line_numbers, quiet=quiet or k > 0)
                      for k, member in enumerate(self.members)]
        return [EnsembleExample(exs[0].src, list(exs)) for exs in zip(*per_member)]

    def collate(self, examples: Sequence[EnsembleExample]) -> Batch:
        """The first member's batch, with every member's source features (a list)."""
        batches = [member.collate([ex.members[k] for ex in examples])
                   for k, member in enumerate(self.members)]
        return replace(batches[0], src_feats=[b.src_feats for b in batches])

    def translate_examples(self, examples, trees_out: list | None = None,
                           target_trees_out: list | None = None, nbest: int = 0) -> list:
        if trees_out is not None or target_trees_out is not None:
            raise DepnmtError(NO_TREES)
        return super().translate_examples(examples, nbest=nbest)


def plain_settings(member: Translator) -> dict:
    """A member's source parser settings without its control."""
    return {k: v for k, v in member.config["parser"]["src"].items() if k != "control"}


def check_members(members: Sequence[Translator], names: Sequence[str]) -> None:
    """A :class:`DepnmtError` naming the first model that cannot join the first one's
    ensemble: other vocabularies, BPE, tokenizers, or (for tree schemes) another parser."""
    first, readers = members[0], [m for m in members if m.needs_trees]
    for member, name in zip(members[1:], names[1:]):
        for what, mine, theirs in (
                ("source vocabulary", member.src_vocab, first.src_vocab),
                ("target vocabulary", member.tgt_vocab, first.tgt_vocab),
                ("BPE", member.segmenter.__reduce__()[1], first.segmenter.__reduce__()[1]),
                ("tokenizers", member.config["tokenizers"], first.config["tokenizers"]),
                ("task tags", member.task_tags, first.task_tags)):
            if mine != theirs:
                raise DepnmtError(f"{name}: its {what} differs from {names[0]}'s; the models of "
                                  f"an ensemble must share their vocabularies, BPE and "
                                  f"tokenizers (train them on the same bpe folder)")
    for member in readers[1:]:
        if plain_settings(member) != plain_settings(readers[0]):
            name, base = (names[members.index(m)] for m in (member, readers[0]))
            raise DepnmtError(f"{name}: its source parser ({plain_settings(member)}) differs from "
                              f"{base}'s ({plain_settings(readers[0])}); the tree-reading models "
                              f"of an ensemble must share their parser")

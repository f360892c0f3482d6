"""Datasets, token-count batching with length bucketing, and the collate step.

Tree features (``Scheme.source_features``, and ``Scheme.target_features`` for schemes
supervised by target trees) are computed by :func:`collate` for the examples of each batch
(``schemes``; what training does, in its data-loader workers: :mod:`depnmt.data.loader`), or once
per example beforehand (:func:`add_features`: dev data, translate) and only padded there.
Either way neither the training step nor ``forward`` reads files or walks trees. What a scheme
derives from a whole batch (GPS's distinct root paths) is
computed on the host by :func:`collate` too (:func:`batch_features`), so that the step does not
wait for the GPU to learn a data-dependent size.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
import torch
from torch import Tensor

from depnmt.core.errors import DepnmtError, InputError
from depnmt.core.textio import iter_lines
from depnmt.core.vocab import BOS, EOS, PAD, Vocab
from depnmt.model.schemes import Scheme, pad_features


@dataclass
class Example:
    """One sentence pair. ``src`` ends with EOS; ``tgt`` has neither BOS nor EOS."""

    index: int
    src: list[int]
    tgt: list[int]
    src_subwords: list[str] = field(default_factory=list)
    src_tree: Any = None                    # depnmt.stages.parse.Sentence over the source words
    feats: dict[str, Tensor] = field(default_factory=dict)
    tgt_subwords: list[str] = field(default_factory=list)
    tgt_tree: Any = None                    # over the target words (training only)
    tgt_feats: dict[str, Tensor] = field(default_factory=dict)   # dims len(tgt) + 1 (BOS + y)


@dataclass
class Batch:
    """A padded batch. ``src [B, S]``, ``tgt_in [B, T]`` (BOS + y), ``tgt_out [B, T]`` (y + EOS),
    ``src_feats`` the schemes' per-sentence tensors (e.g. ``[B, S, S]`` tree labels),
    ``tgt_feats`` their target-side ones, padded to ``T`` (aligned with ``tgt_in``).
    ``counts``: (target, source) non-PAD tokens, counted on the host when the batch is
    collated, so that reading them never waits for a GPU."""

    ids: list[int]
    src: Tensor
    tgt_in: Tensor
    tgt_out: Tensor
    src_feats: dict[str, Tensor]
    tgt_feats: dict[str, Tensor] = field(default_factory=dict)
    counts: tuple[int, int] | None = None

    @property
    def n_tokens(self) -> int:
        """Target tokens (incl. EOS) that the loss is summed over."""
        return self.counts[0] if self.counts else int((self.tgt_out != PAD).sum())

    @property
    def n_src_tokens(self) -> int:
        return self.counts[1] if self.counts else int((self.src != PAD).sum())

    def to(self, device: torch.device) -> "Batch":
        """The batch on ``device`` (copied asynchronously to a GPU; see :meth:`pin`)."""
        nb = device.type == "cuda"
        return self._map(lambda t: t.to(device, non_blocking=nb))

    def pin(self) -> "Batch":
        """The batch in page-locked host memory, from which ``to(cuda)`` copies without
        blocking the host (from pageable memory ``non_blocking`` copies synchronously)."""
        return self._map(Tensor.pin_memory)

    pin_memory = pin              # what a DataLoader's pinning thread calls

    def _map(self, move) -> "Batch":
        counts = self.counts or (self.n_tokens, self.n_src_tokens)
        return Batch(self.ids, move(self.src), move(self.tgt_in), move(self.tgt_out),
                     {k: move(v) for k, v in self.src_feats.items()},
                     {k: move(v) for k, v in self.tgt_feats.items()}, counts)


def pad_2d(rows: Sequence[Sequence[int]], length: int | None = None) -> Tensor:
    """``[len(rows), length]`` int64 tensor of ``rows`` padded with PAD."""
    length = length or max((len(r) for r in rows), default=1) or 1
    out = torch.full((len(rows), length), PAD, dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r, dtype=torch.long)
    return out


def collate(examples: Sequence[Example], schemes: Sequence[Scheme] | None = None) -> Batch:
    """Pad a list of examples into a :class:`Batch`, with their features as
    :func:`add_features` left them. Given the model's ``schemes``, an example without features
    gets them now (lazy features, kept by no one once the batch is gone), and the schemes add
    what they derive from the whole batch (:func:`batch_features`); without, a scheme that has
    batch features computes them on the device (GPS: a host synchronisation per batch)."""
    src = pad_2d([e.src for e in examples])
    tgt_in = pad_2d([[BOS] + e.tgt for e in examples])
    tgt_out = pad_2d([e.tgt + [EOS] for e in examples])
    both = [scheme_features(e, schemes) if schemes is not None and not (e.feats or e.tgt_feats)
            else (e.feats, e.tgt_feats) for e in examples]
    feats = batch_features(pad_features([f for f, _ in both], src.shape[1]), schemes or ())
    tgt_feats = pad_features([t for _, t in both], tgt_in.shape[1])
    counts = (sum(t != PAD for e in examples for t in e.tgt) + len(examples),   # + EOS
              sum(t != PAD for e in examples for t in e.src))
    return Batch([e.index for e in examples], src, tgt_in, tgt_out, feats, tgt_feats, counts)


def encode_source(subwords: list[str], vocab: Vocab, max_len: int | None = None) -> list[int]:
    """Source ids with EOS appended (``max_len`` counts subwords, EOS excluded)."""
    if max_len is not None:
        subwords = subwords[:max_len]
    return vocab.encode(subwords) + [EOS]


def add_features(examples: list[Example], schemes: Sequence[Scheme]) -> None:
    """Compute every scheme's per-example source (and target) features, once, at load time."""
    for ex in examples:
        feats, tgt_feats = scheme_features(ex, schemes)
        ex.feats.update(feats)
        ex.tgt_feats.update(tgt_feats)


def scheme_features(ex: Example, schemes: Sequence[Scheme]) -> tuple[dict[str, Tensor],
                                                                    dict[str, Tensor]]:
    """Every scheme's source and target features of ``ex`` (e.g. ``[S, S]`` tree labels)."""
    feats: dict[str, Tensor] = {}
    tgt_feats: dict[str, Tensor] = {}
    for scheme in schemes:
        feats.update(scheme.source_features(ex))
        tgt_feats.update(scheme.target_features(ex))
    return feats, tgt_feats


def batch_features(feats: dict[str, Tensor], schemes: Sequence[Scheme]) -> dict[str, Tensor]:
    """A batch's padded source features with every scheme's batch-level ones added
    (:meth:`~depnmt.model.schemes.Scheme.batch_features`, e.g. GPS's distinct root paths)."""
    for scheme in schemes:
        feats = scheme.batch_features(feats)
    return feats


def load_parallel(src_path: Path, tgt_path: Path, src_vocab: Vocab, tgt_vocab: Vocab,
                  max_len: int | None = None, drop_long: bool = False) -> tuple[list[Example], int]:
    """Read a subword-segmented pair of files into examples.

    ``max_len``: with ``drop_long`` (training) pairs longer than it on either side are skipped
    and counted; otherwise (evaluation) they are truncated. Returns (examples, dropped).
    """
    examples, dropped = [], 0
    src_lines, tgt_lines = iter_lines(src_path), iter_lines(tgt_path)
    for i, (s, t) in enumerate(zip(src_lines, tgt_lines)):
        s_tok, t_tok = s.split(), t.split()
        if drop_long and max_len and (len(s_tok) > max_len or len(t_tok) > max_len):
            dropped += 1
            continue
        examples.append(Example(i, encode_source(s_tok, src_vocab, max_len),
                                tgt_vocab.encode(t_tok[:max_len] if max_len else t_tok), s_tok,
                                tgt_subwords=t_tok))
    leftover = next(src_lines, None) is not None or next(tgt_lines, None) is not None
    if leftover:
        raise DepnmtError(f"{src_path} and {tgt_path} have different line counts")
    return examples, dropped


def attach_trees(examples: list[Example], conllu_path: Path, side: str = "src",
                 text: Path | None = None) -> None:
    """Attach the word-level trees of ``conllu_path`` (one per line of the corpus) to examples
    by line index, as ``src_tree`` or (``side="tgt"``) ``tgt_tree``. A tree over other words
    than its line is an error naming both places: ``conllu_path``'s line and the line of
    ``text``, the subword file the examples were read from (when given)."""
    from depnmt.core.conllu import read_conllu_numbered
    from depnmt.core.subwords import merge_subwords
    numbered = list(read_conllu_numbered(conllu_path))
    for ex in examples:
        if ex.index >= len(numbered):
            raise InputError(conllu_path, None, f"has {len(numbered)} trees but the text has more "
                                                f"lines")
        lineno, tree = numbered[ex.index]
        words = merge_subwords(ex.src_subwords if side == "src" else ex.tgt_subwords)
        if list(tree.words) != words:
            where = f"{text}:{ex.index + 1}" if text is not None else f"text line {ex.index + 1}"
            raise InputError(conllu_path, lineno, f"tree {ex.index + 1} has words "
                                                  f"{tree.words[:8]}… but {where} has "
                                                  f"{words[:8]}…")
        setattr(ex, f"{side}_tree", tree)


class TokenBatcher:
    """Batches of at most ``max_tokens`` padded tokens with length bucketing.

    What is counted: ``size × longest``, ``longest`` = the longest sequence of the batch on either
    side (source ids incl. EOS, target incl. BOS/EOS: the padded tensors' widths). Examples are
    sorted by that same per-example length, max(source, target), then by target length, with a
    random tie-break, and cut greedily into batches that stay within ``max_tokens``; the batch
    order is shuffled. Sorting by what is counted fills batches better than sorting by source
    length (Multi30k, 4,096: 3,856 instead of 3,527 target tokens per batch, and 2.9% instead of
    13.7% target padding). Everything depends only on ``(seed, epoch)``, so a resumed run sees
    the same order. The batches' shapes (sentences, longest source, longest target) are the same
    every epoch, only their order and which of the equal-length pairs fill them change: a GPU's
    cuDNN attention, which plans each new shape, pays that once (docs/gpu.md).

    ``max_sentences`` (``depnmt train --batch-sentences``) also closes a batch at that many
    sentences: the two limits combine, whichever is reached first. Batches of exactly N
    sentences, as both Omote et al. papers state their batch sizes, need ``max_tokens`` of at
    least N × the longest pair (only the epoch's last batch is then shorter).
    """

    def __init__(self, lengths: Sequence[tuple[int, int]] | np.ndarray, max_tokens: int,
                 seed: int = 1, shuffle: bool = True, max_sentences: int | None = None):
        """``lengths``: ``[pairs, 2]`` (source, target) lengths, a list or an array."""
        self.lengths = np.asarray(lengths, dtype=np.int64).reshape(-1, 2)
        self.max_tokens, self.seed, self.shuffle = max_tokens, seed, shuffle
        self.max_sentences = max_sentences

    def batches(self, epoch: int) -> list[np.ndarray]:
        """The epoch's batches, each an array of example indices. The sort is an array sort
        (seconds for millions of pairs) by the same keys, and the same random tie-breaks
        (drawn in index order), as a sort of the pairs by ``(max, target, source, random)``."""
        rng = random.Random(self.seed * 100003 + epoch)
        n = len(self.lengths)
        src, tgt = self.lengths[:, 0], self.lengths[:, 1]
        size = np.maximum(src, tgt)
        tie = (np.fromiter((rng.random() for _ in range(n)), np.float64, n) if self.shuffle
               else np.arange(n))
        order = np.lexsort((tie, src, tgt, size))
        cuts = self._cuts(size[order].tolist())
        batches = np.split(order, cuts[1:-1]) if n else []
        if self.shuffle:
            rng.shuffle(batches)
        return batches

    def _cuts(self, sizes: list[int]) -> list[int]:
        """Where the greedy cut of the sorted ``sizes`` starts each batch (and the end)."""
        cuts, count, longest = [0], 0, 0
        cap = self.max_sentences
        for i, size in enumerate(sizes):
            new_longest = longest if longest > size else size
            if count and ((count + 1) * new_longest > self.max_tokens
                          or cap is not None and count >= cap):
                cuts.append(i)
                count, new_longest = 0, size
            count += 1
            longest = new_longest
        cuts.append(len(sizes))
        return cuts


def iterate_batches(examples: Sequence[Example], batcher: TokenBatcher, epoch: int,
                    start: int = 0, schemes: Sequence[Scheme] | None = None
                    ) -> Iterator[tuple[int, Batch]]:
    """Yield ``(batch_number, Batch)`` for ``epoch``, skipping the first ``start`` batches
    (collated with the model's ``schemes``, :func:`collate`)."""
    for n, idx in enumerate(batcher.batches(epoch)):
        if n >= start:
            yield n, collate([examples[i] for i in idx], schemes)


def shard_updates(n_batches: int, update_freq: int, start: int = 0, rank: int = 0,
                  world: int = 1) -> Iterator[tuple[int, list[int]]]:
    """The batch numbers of each update of an epoch of ``n_batches``, from batch ``start`` on.

    An update takes the next ``update_freq × world`` batches of the epoch's order; rank ``r``
    gets the ``r``-th, ``(r + world)``-th, … of them, so ``world`` processes see together what
    one process sees with ``--update-freq`` ``update_freq × world``. A last, incomplete group
    is dropped (by every rank alike). Yields ``(batches done after the update, batch numbers)``.
    """
    size = update_freq * world
    for first in range(start, n_batches - size + 1, size):
        yield first + size, list(range(first + rank, first + size, world))


def iterate_updates(examples: Sequence[Example], batcher: TokenBatcher, epoch: int,
                    update_freq: int, start: int = 0, rank: int = 0, world: int = 1,
                    schemes: Sequence[Scheme] | None = None) -> Iterator[tuple[int, list[Batch]]]:
    """Yield ``(batches done, this rank's batches)`` for each update of ``epoch`` (see
    :func:`shard_updates`); only this rank's batches are collated (with the model's
    ``schemes``: the features of examples without any computed then, and the batch features
    added, :func:`collate`)."""
    order = batcher.batches(epoch)
    for done, numbers in shard_updates(len(order), update_freq, start, rank, world):
        yield done, [collate([examples[i] for i in order[n]], schemes) for n in numbers]


def pinned(updates: Iterator[tuple[int, list[Batch]]]) -> Iterator[tuple[int, list[Batch]]]:
    """:func:`iterate_updates`' items with their batches pinned (:meth:`Batch.pin`; run it in
    :func:`prefetch`'s thread, so that pinning overlaps the training step too)."""
    for done, batches in updates:
        yield done, [b.pin() for b in batches]


def prefetch(items: Iterator, depth: int = 2) -> Iterator:
    """Run ``items`` (e.g. :func:`iterate_updates`) in a background thread, ``depth`` ahead, so
    that collating the next batches overlaps the training step (used on CUDA, where the step
    does not need the CPU). Exceptions are re-raised in the consumer."""
    import queue
    import threading

    q: queue.Queue = queue.Queue(maxsize=depth)
    done = object()
    stop = threading.Event()

    def work() -> None:
        try:
            for item in items:
                if stop.is_set():
                    return
                q.put(item)
        except BaseException as exc:  # handed to the consumer
            q.put(exc)
        q.put(done)

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    try:
        while (item := q.get()) is not done:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()


def example_lengths(examples: Sequence[Example]) -> list[tuple[int, int]]:
    return [(len(e.src), len(e.tgt) + 1) for e in examples]

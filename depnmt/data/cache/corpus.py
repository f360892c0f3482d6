"""The training corpus as a sequence of examples read from the cache, one at a time.

:class:`TrainCorpus` is what ``train`` holds of its training data: the offsets of the cache's
arrays (8 bytes a pair and side), the indices of the pairs it keeps (those within
``--max-len``) and their lengths (for the batcher). ``corpus[k]`` reads pair ``k``'s token
ids and trees from the cache and returns the same :class:`~depnmt.data.batches.Example` that
loading the text files gives (:func:`depnmt.data.batches.load_parallel` and
:func:`~depnmt.data.batches.attach_trees`): ids with EOS, the subwords (for schemes that project
trees onto them; an unknown subword is ``<unk>``, with its ``@@`` kept) and the trees, whose
:attr:`~depnmt.stages.parse.Sentence.origin` names the CoNLL-U file and line. The examples are
made for a batch and dropped with it; the tree features are computed when it is collated.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from depnmt.core.conllu import Sentence
from depnmt.core.subwords import SEPARATOR, merge_subwords
from depnmt.core.vocab import EOS, SPECIALS, UNK, Vocab
from depnmt.core.wordtable import WordTable
from depnmt.data.batches import Example
from depnmt.data.cache.arrays import (LINES, OFFSETS, TOKENS, WORDS, ItemReader, RowReader,
                                      read_array)

UNK_CONTINUED = UNK << 1 | 1
LEARN_ROWS = 16384               # trees read at once by the learn step


@dataclass
class TreeRows:
    """One side's trees in a cache entry: words (:data:`~.arrays.WORDS`) cut by offsets, the
    line of ``conllu`` where each starts, and the names of the relation and UPOS ids."""

    words: RowReader
    lines: ItemReader
    conllu: Path
    rels: list[str]
    tags: list[str]

    @classmethod
    def open(cls, entry: Path, meta: dict[str, Any], conllu: Path) -> "TreeRows":
        offsets = read_array(entry, "offsets.bin", OFFSETS)
        return cls(RowReader(entry / "words.bin", WORDS, offsets),
                   ItemReader(entry / "lines.bin", LINES), conllu, meta["rels"], meta["tags"])

    def sentence(self, words: np.ndarray, subwords: list[str], line: int) -> Sentence:
        """The tree of ``words`` (records), over the words of ``subwords``."""
        n = len(words)
        rels, tags = self.rels, self.tags
        upos = [tags[t] for t in words["upos"].tolist()] if n and words["upos"][0] >= 0 else None
        sent = words["sent"].tolist() if n and words["sent"][0] >= 0 else None
        return Sentence(merge_subwords(subwords), words["head"].tolist(),
                        [rels[r] for r in words["rel"].tolist()], upos, sent,
                        origin=(str(self.conllu), line))


@dataclass
class Side:
    """One side of the corpus: its token codes (``id << 1 | continues``), vocabulary and,
    when a scheme reads them, trees."""

    tokens: RowReader
    vocab: Vocab
    trees: TreeRows | None = None

    @classmethod
    def open(cls, entry: Path, vocab: Vocab) -> "Side":
        return cls(RowReader(entry / "tokens.bin", TOKENS,
                             read_array(entry, "offsets.bin", OFFSETS)), vocab)

    def lengths(self) -> np.ndarray:
        """``[lines]`` subwords per line."""
        return np.diff(self.tokens.offsets)

    def subwords(self, codes: np.ndarray) -> list[str]:
        itos = self.vocab.itos
        return [SPECIALS[UNK] + SEPARATOR if c == UNK_CONTINUED else itos[c >> 1]
                for c in codes.tolist()]


class TrainCorpus:
    """The kept pairs of a cached training split as a sequence of examples (module
    docstring). ``keep``: ``[pairs]`` line indices of the kept pairs. ``source_digests``:
    ``{file name: sha256}`` of the files the cache was checked against at this start (the
    split's two texts, the vocabularies, the CoNLL-U files of the sides with trees): the
    exact bytes the examples come from, e.g. for a record of a model's training data."""

    def __init__(self, src: Side, tgt: Side, keep: np.ndarray,
                 source_digests: dict[str, str] | None = None):
        self.src, self.tgt, self.keep = src, tgt, keep
        self.source_digests = dict(source_digests or {})

    def __len__(self) -> int:
        return len(self.keep)

    def __getitem__(self, k: int) -> Example:
        i = int(self.keep[k])
        src, tgt = self.src.tokens[i], self.tgt.tokens[i]
        ex = Example(i, (src >> 1).tolist() + [EOS], (tgt >> 1).tolist())
        for name, side, codes in (("src", self.src, src), ("tgt", self.tgt, tgt)):
            if side.trees is not None:
                subwords = side.subwords(codes)
                setattr(ex, f"{name}_subwords", subwords)
                setattr(ex, f"{name}_tree", side.trees.sentence(side.trees.words[i], subwords,
                                                                int(side.trees.lines[i])))
        return ex

    def lengths(self) -> np.ndarray:
        """``[pairs, 2]``: source length with EOS, target length with BOS (what the batcher
        counts; :func:`depnmt.data.batches.example_lengths`)."""
        return np.stack([self.src.lengths()[self.keep] + 1,
                         self.tgt.lengths()[self.keep] + 1], axis=1)

    def source_tables(self) -> "SourceTables":
        """The kept pairs' source trees as :class:`~depnmt.core.wordtable.WordTable` pieces of
        :data:`LEARN_ROWS` trees, read from the cache: what the learn step counts over
        (:func:`~depnmt.model.schemes.registry.learn_options`)."""
        return SourceTables(self)


class SourceTables:
    """Re-iterable: the source trees of a :class:`TrainCorpus`, a piece at a time."""

    def __init__(self, corpus: TrainCorpus):
        self.corpus = corpus

    def __iter__(self) -> Iterator[WordTable]:
        trees, keep = self.corpus.src.trees, self.corpus.keep
        if trees is None:
            return
        for start in range(0, len(keep), LEARN_ROWS):
            words, offsets = block(trees, keep[start:start + LEARN_ROWS])
            first = np.repeat(offsets[:-1], np.diff(offsets))
            yield WordTable(words["head"].astype(np.int64), words["rel"].astype(np.int64),
                            words["upos"].astype(np.int64), words["sent"].astype(np.int64),
                            first, trees.rels, trees.tags)


def block(trees: TreeRows, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The words of the trees ``rows`` (increasing line indices), read in one piece and
    packed, with ``[len(rows) + 1]`` offsets into them."""
    offsets = trees.words.offsets
    first, last = int(rows[0]), int(rows[-1]) + 1
    base = int(offsets[first])
    words = np.fromfile(trees.words.path, WORDS, int(offsets[last]) - base,
                        offset=base * WORDS.itemsize)
    lengths = offsets[rows + 1] - offsets[rows]
    if len(rows) != last - first:                   # pairs left out: pack the kept ones
        take = np.repeat(offsets[rows] - base - np.cumsum(np.r_[0, lengths[:-1]]), lengths)
        words = words[take + np.arange(int(lengths.sum()))]
    return words, np.r_[0, np.cumsum(lengths)]

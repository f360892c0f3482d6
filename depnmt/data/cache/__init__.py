"""The training data on disk: token ids and trees as flat binary arrays, read a pair at a time.

``train`` used to hold the whole corpus as Python objects (ids, subword strings, parsed
trees; some 10 KB a pair), loaded anew at every start. It now builds, once per data folder,
a cache of the numbers it needs (:mod:`.build`: the text files cut into pieces and
converted on every core; :mod:`.entries`: where the cache lives, all or nothing, one
writer, rebuilt when a text or tree file changes; :mod:`.arrays`: the format and its
checks) and holds only offsets and lengths, reading each batch's pairs when the batch is
collated (:mod:`.corpus`). The text files stay what users read and edit; the cache is made
from them and checked against their bytes (sha256) at every start, which the corpus then
reports (:attr:`TrainCorpus.source_digests`) so that nothing reads them twice. fairseq's
``MMapIndexedDataset`` (a flat ``.bin`` with an index of offsets and sizes) is the model for
the layout.

    corpus, dropped = open_corpus(data_dir, "train", langs, vocabs, trees, max_len)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from depnmt.core.errors import DepnmtError
from depnmt.core.vocab import Vocab
from depnmt.core.workers import available_cores
from depnmt.data.cache.build import build_text, build_trees
from depnmt.data.cache.corpus import Side, TrainCorpus, TreeRows
from depnmt.data.cache.entries import cache_root, ensure_entry, path_digest

__all__ = ["open_corpus", "TrainCorpus", "cache_root"]


def open_corpus(data_dir: Path, split: str, langs: dict[str, str], vocabs: dict[str, Vocab],
                trees: dict[str, Path], max_len: int | None, jobs: int | None = None,
                known: dict[Path, str] | None = None) -> tuple[TrainCorpus, int]:
    """The pairs of ``split`` (``DATA/SPLIT.LANG`` of both sides, ``langs``: side -> language)
    with the trees of the sides in ``trees`` (side -> CoNLL-U file), from the cache (built
    first where needed, in ``jobs`` processes, default every core). Pairs longer than
    ``max_len`` subwords on either side are left out: returns (corpus, pairs left out). The
    corpus's :attr:`~.corpus.TrainCorpus.source_digests` are the sha256 of the files it was
    checked against (texts, vocabularies, CoNLL-U files), each read once; ``known``: the
    sha256 of some of them already read by the caller (path -> sha256), not read again."""
    jobs = jobs or available_cores()
    root = cache_root(data_dir)
    sides: dict[str, Side] = {}
    digests: dict[Path, str] = dict(known or {})    # every source's sha256, read once
    for side, lang in langs.items():
        text = data_dir / f"{split}.{lang}"
        vocab_file = data_dir / f"vocab.{side}.txt"
        entry, meta = ensure_entry(root, f"text-{split}.{lang}",
                                   {text.name: text, vocab_file.name: vocab_file},
                                   lambda out: build_text(text, vocab_file, out, jobs), digests)
        sides[side] = Side.open(entry, vocabs[side])
        if side in trees:
            sides[side].trees = open_trees(root, trees[side], (text, entry, meta), jobs,
                                           digests)
    if len(sides["src"].tokens) != len(sides["tgt"].tokens):
        src, tgt = (data_dir / f"{split}.{langs[side]}" for side in ("src", "tgt"))
        raise DepnmtError(f"{src} and {tgt} have different line counts")
    keep = np.ones(len(sides["src"].tokens), bool)
    if max_len:
        keep &= (sides["src"].lengths() <= max_len) & (sides["tgt"].lengths() <= max_len)
    index = np.flatnonzero(keep)
    return (TrainCorpus(sides["src"], sides["tgt"], index,
                        {path.name: digest for path, digest in digests.items()}),
            int(len(keep) - len(index)))


def open_trees(root: Path, conllu: Path, text: tuple[Path, Path, dict], jobs: int,
               digests: dict[Path, str]) -> TreeRows:
    """The tree entry of ``conllu``, made against the text entry of its side (``text``: the
    subword file, its entry and the entry's meta); ``digests``: as for :func:`ensure_entry`."""
    source, text_entry, text_meta = text
    entry, meta = ensure_entry(
        root, f"trees-{conllu.name.removesuffix('.conllu')}-{path_digest(conllu, 12)}",
        {conllu.name: conllu, source.name: source},
        lambda out: build_trees(conllu, (source, text_entry, text_meta["lines"]), out, jobs),
        digests)
    return TreeRows.open(entry, meta, conllu)
